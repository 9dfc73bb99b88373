//! A client's fields passed to the upstream as they came (an old client's request passed
//! through): read from the client's own map by the upstream's connection as it writes the
//! request, rather than copied into a map of their own first — a copy that only the
//! fields left out would differ from, made and dropped on every call.

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::wire::hop_by_hop::{Listed, is_hop_by_hop};

/// The fields of `headers` that pass: all but the hop-by-hop ones, those a `Connection`
/// field lists, and those the path names (what it checked itself). The transport leaves
/// out what it writes itself besides (`connections::OwnFields`).
#[derive(Debug)]
pub struct Passed<'a> {
    headers: &'a HeaderMap,
    left_out: LeftOut<'a>,
}

impl<'a> Passed<'a> {
    /// `headers`' fields less the hop-by-hop ones and `checked`: which are left out is
    /// told once, by a look over the names, so that each field written is only looked
    /// for among them (most clients send one, `Connection: keep-alive`).
    pub fn new(headers: &'a HeaderMap, checked: &[&HeaderName]) -> Self {
        let listed = Listed::of(headers);
        let mut left_out = LeftOut::Few([None; FEW]);
        for name in headers.keys() {
            if is_hop_by_hop(name) || checked.contains(&name) || listed.lists(name) {
                left_out.push(name);
            }
        }
        Passed { headers, left_out }
    }

    /// Whether a field named `name` passes.
    fn passes(&self, name: &HeaderName) -> bool {
        !self.left_out.contains(name)
    }

    /// The first value of the field `name`, if it passes.
    pub fn get(&self, name: &HeaderName) -> Option<&'a HeaderValue> {
        self.headers.get(name).filter(|_| self.passes(name))
    }

    /// The fields that pass, in the map's order (names as they first came, the values of
    /// one name together, in theirs).
    pub fn iter(&self) -> impl Iterator<Item = (&'a HeaderName, &'a HeaderValue)> + '_ {
        self.headers.iter().filter(|(name, _)| self.passes(name))
    }

    /// How many fields the client sent (at least as many as pass).
    pub fn sent(&self) -> usize {
        self.headers.len()
    }
}

/// How many names left out are kept without an allocation.
const FEW: usize = 4;

/// The names of the fields left out.
#[derive(Debug)]
enum LeftOut<'a> {
    /// Up to [`FEW`], the first ones.
    Few([Option<&'a HeaderName>; FEW]),
    /// More.
    Many(Vec<&'a HeaderName>),
}

impl<'a> LeftOut<'a> {
    fn push(&mut self, name: &'a HeaderName) {
        match self {
            LeftOut::Few(few) => match few.iter_mut().find(|slot| slot.is_none()) {
                Some(slot) => *slot = Some(name),
                None => {
                    let mut many: Vec<&HeaderName> = few.iter().flatten().copied().collect();
                    many.push(name);
                    *self = LeftOut::Many(many);
                }
            },
            LeftOut::Many(many) => many.push(name),
        }
    }

    fn contains(&self, name: &HeaderName) -> bool {
        match self {
            LeftOut::Few(few) => few.iter().map_while(|slot| *slot).any(|left| left == name),
            LeftOut::Many(many) => many.contains(&name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// More names left out than are kept without an allocation: each still left out,
    /// the rest passed.
    #[test]
    fn any_number_of_names_is_left_out() {
        let mut h = HeaderMap::new();
        h.append("connection", "a, b, c, d, e".parse().unwrap());
        for name in ["a", "x", "b", "c", "d", "e", "te", "y"] {
            h.append(HeaderName::from_static(name), "1".parse().unwrap());
        }
        let passed = Passed::new(&h, &[&HeaderName::from_static("y")]);
        let names: Vec<&str> = passed.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["x"]);
        assert!(passed.get(&HeaderName::from_static("c")).is_none());
        assert_eq!(passed.get(&HeaderName::from_static("x")).unwrap(), "1");
    }
}
