//! Reading the merged layers into the raw configuration with every problem collected.
//!
//! Deserialization stops at the first value that does not fit, so a problem found is
//! noted, its value dropped (the key's default applies) and the rest read again, until
//! everything fits: a file with three bad entries reports all three. Each problem names
//! its key, says where the value came from (the file, the environment variable, the
//! flag), and what to write instead — in the proxy's words, not the deserializer's.

use std::collections::HashMap;

use figment::error::{Actual, Kind};
use figment::providers::Serialized;
use figment::value::Value;
use figment::{Figment, Metadata};

use super::raw::RawConfig;
use super::{ENV_PREFIX, Problem};

/// More rounds than any configuration has keys: a safety net, never reached in practice.
const MAX_ROUNDS: usize = 1000;

/// The raw configuration the layers give, and every key that could not be read (each
/// already replaced by its default). `Err` when a layer itself is unreadable (a file
/// that is not TOML): nothing else can be checked then.
///
/// `env` holds the environment variables as written, by dotted key: the environment
/// layer reads `007` as the number 7, and a key that takes a string gets the text back.
pub(super) fn read(
    figment: &Figment,
    env: &HashMap<String, String>,
) -> Result<(RawConfig, Vec<Problem>), Vec<Problem>> {
    let mut tree = figment.find_value("").map_err(|e| {
        e.into_iter()
            .map(|e| Problem {
                key: source_name(e.metadata.as_ref()),
                why: e.kind.to_string(),
                origin: None,
            })
            .collect::<Vec<_>>()
    })?;
    let defaults = Figment::from(Serialized::defaults(RawConfig::default()))
        .find_value("")
        .ok();
    let keys = KnownKeys::probe(defaults.as_ref());
    let mut problems = Vec::new();
    for _ in 0..MAX_ROUNDS {
        let errors = match Figment::from(Serialized::defaults(&tree)).extract::<RawConfig>() {
            Ok(raw) => return Ok((raw, problems)),
            Err(errors) => errors,
        };
        let mut progress = false;
        for error in errors {
            let mut path = error.path.clone();
            if let Kind::UnknownField(name, _) = &error.kind
                && path.last() != Some(name)
            {
                path.push(name.clone());
            }
            let origin = find(&tree, &path)
                .and_then(|value| figment.get_metadata(value.tag()))
                .and_then(|metadata| Origin::of(metadata, &path));
            if let (Some(Origin::Env(_)), Kind::InvalidType(actual, expected)) =
                (&origin, &error.kind)
                && expected.contains("string")
                && matches!(
                    actual,
                    Actual::Bool(_) | Actual::Unsigned(_) | Actual::Signed(_) | Actual::Float(_)
                )
                && let Some(text) = env.get(&path.join("."))
                && let Some(slot) = find_mut(&mut tree, &path)
            {
                *slot = Value::from(text.clone());
                progress = true;
                continue;
            }
            problems.push(describe(
                &error.kind,
                &path,
                origin,
                defaults.as_ref(),
                &keys,
            ));
            progress |= remove(&mut tree, &path);
        }
        if !progress {
            break;
        }
    }
    Err(problems)
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Origin {
    File(String),
    Env(String),
    Flag(String),
}

impl Origin {
    /// The layer that gave the value at `path`, from its provider's metadata; `None` for
    /// the built-in defaults.
    fn of(metadata: &Metadata, path: &[String]) -> Option<Origin> {
        if let Some(figment::Source::File(file)) = &metadata.source {
            return Some(Origin::File(file.display().to_string()));
        }
        let name = metadata.name.as_ref();
        if name.contains(ENV_PREFIX) {
            return Some(Origin::Env(env_var(path)));
        }
        // The flags' layers are named after them (`config::Flag`); the defaults' layer is
        // not named like a flag.
        (name.starts_with("--") || name.contains("`--`")).then(|| Origin::Flag(name.to_owned()))
    }

    /// The origin of the value at `key` (as [`key_of`] writes it), if it came from a
    /// layer.
    pub(super) fn of_key(figment: &Figment, key: &str) -> Option<Origin> {
        let path: Vec<String> = key
            .split(['.', '['])
            .map(|segment| segment.trim_end_matches(']').to_owned())
            .collect();
        let tree = figment.find_value("").ok()?;
        let value = find(&tree, &path)?;
        // A list is set whole by one variable: a value inside one (`auth.limits[0].rate`)
        // is named by the list's (`MCP_PROXY_AUTH__LIMITS`).
        let list: Vec<String> = key
            .split('[')
            .next()
            .unwrap_or(key)
            .split('.')
            .map(str::to_owned)
            .collect();
        Origin::of(figment.get_metadata(value.tag())?, &list)
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::File(file) => write!(f, "in {file}"),
            Origin::Env(var) => write!(f, "from the environment variable {var}"),
            Origin::Flag(flag) => write!(f, "from {flag}"),
        }
    }
}

/// A key path as the problems name it: `session.idle_ttl`, `allowed_origins[1]`.
pub(super) fn key_of(path: &[String]) -> String {
    let mut key = String::new();
    for segment in path {
        if !key.is_empty() && segment.parse::<usize>().is_ok() {
            key.push_str(&format!("[{segment}]"));
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(segment);
        }
    }
    key
}

/// The environment variable that sets the key at `path`.
fn env_var(path: &[String]) -> String {
    let keys: Vec<String> = path.iter().map(|k| k.to_ascii_uppercase()).collect();
    format!("{ENV_PREFIX}{}", keys.join("__"))
}

fn source_name(metadata: Option<&Metadata>) -> String {
    match metadata {
        Some(Metadata {
            source: Some(figment::Source::File(file)),
            ..
        }) => file.display().to_string(),
        Some(metadata) => metadata.name.to_string(),
        None => "the configuration".to_owned(),
    }
}

/// The value at `path`: dictionary keys, and indices into arrays.
fn find<'v>(tree: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(tree, |value, key| match value {
        Value::Dict(_, dict) => dict.get(key),
        Value::Array(_, items) => items.get(key.parse::<usize>().ok()?),
        _ => None,
    })
}

fn find_mut<'v>(tree: &'v mut Value, path: &[String]) -> Option<&'v mut Value> {
    path.iter().try_fold(tree, |value, key| match value {
        Value::Dict(_, dict) => dict.get_mut(key),
        Value::Array(_, items) => items.get_mut(key.parse::<usize>().ok()?),
        _ => None,
    })
}

/// Removes the value at `path`; whether there was one.
fn remove(tree: &mut Value, path: &[String]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let Some(value) = find_mut(tree, parents) else {
        return false;
    };
    match value {
        Value::Dict(_, dict) => dict.remove(last).is_some(),
        Value::Array(_, items) => match last.parse::<usize>() {
            Ok(i) if i < items.len() => {
                items.remove(i);
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// Where the default of the key at `path` is: an `[upstreams.NAME]` key overrides the
/// `[upstream]` one of the same name, an `[upstreams.NAME.stateless]` key the
/// `[stateless]` one (their tables have no defaults of their own).
fn default_path(path: &[String]) -> Vec<String> {
    match path {
        [upstreams, _, stateless, rest @ ..]
            if upstreams == "upstreams" && stateless == "stateless" =>
        {
            ["stateless".to_owned()]
                .into_iter()
                .chain(rest.iter().cloned())
                .collect()
        }
        [upstreams, _, rest @ ..] if upstreams == "upstreams" && !rest.is_empty() => {
            ["upstream".to_owned()]
                .into_iter()
                .chain(rest.iter().cloned())
                .collect()
        }
        _ => path.to_vec(),
    }
}

/// One problem in the proxy's words.
fn describe(
    kind: &Kind,
    path: &[String],
    origin: Option<Origin>,
    defaults: Option<&Value>,
    keys: &KnownKeys,
) -> Problem {
    let key = key_of(path);
    let default = defaults.and_then(|d| find(d, &default_path(path)));
    let why = match kind {
        Kind::UnknownField(name, valid) => unknown_key(name, valid, path, origin.as_ref(), keys),
        Kind::InvalidType(Actual::Str(one), _) if matches!(default, Some(Value::Array(..))) => {
            format!("{one:?} is not a list; write it in brackets: [{one:?}]")
        }
        Kind::InvalidType(actual, expected) | Kind::InvalidValue(actual, expected) => {
            let example = default;
            format!(
                "{} is not {}",
                found(actual),
                wanted(example, expected, origin.as_ref(), path)
            )
        }
        Kind::InvalidLength(_, expected) => format!("must be {expected}"),
        Kind::UnknownVariant(name, valid) => {
            format!("{name:?} is not one of {}", readable_list(valid))
        }
        other => other.to_string(),
    };
    Problem { key, why, origin }
}

/// Every key of every table, as serde knows them (so the list cannot drift from
/// `raw.rs`): the top level's from the defaults, each table's by asking serde to read an
/// unknown key in it and keeping the names its refusal lists.
struct KnownKeys(Vec<Vec<String>>);

impl KnownKeys {
    fn probe(defaults: Option<&Value>) -> KnownKeys {
        let mut keys = Vec::new();
        let Some(Value::Dict(_, top)) = defaults else {
            return KnownKeys(keys);
        };
        for (name, value) in top {
            keys.push(vec![name.clone()]);
            if !matches!(value, Value::Dict(..)) {
                continue;
            }
            let mut probe = figment::value::Dict::new();
            let mut table = figment::value::Dict::new();
            table.insert("\u{1}".into(), Value::from(0u8));
            probe.insert(name.clone(), Value::from(table));
            let refusal = Figment::from(Serialized::defaults(probe)).extract::<RawConfig>();
            if let Err(errors) = refusal {
                for error in errors {
                    if let Kind::UnknownField(_, valid) = error.kind {
                        keys.extend(
                            valid
                                .iter()
                                .map(|key| vec![name.clone(), (*key).to_owned()]),
                        );
                    }
                }
            }
        }
        KnownKeys(keys)
    }

    /// The key path elsewhere whose last name is (nearly) `name`.
    fn elsewhere(&self, name: &str, table: &[String]) -> Option<&[String]> {
        let names: Vec<&str> = self
            .0
            .iter()
            .filter(|path| path[..path.len() - 1] != *table)
            .filter_map(|path| path.last().map(String::as_str))
            .collect();
        let closest = closest(name, &names)?;
        self.0
            .iter()
            .find(|path| {
                path[..path.len() - 1] != *table && path.last().map(String::as_str) == Some(closest)
            })
            .map(Vec::as_slice)
    }
}

/// "unknown key; did you mean …? The keys of [session] are …".
fn unknown_key(
    name: &str,
    valid: &[&str],
    path: &[String],
    origin: Option<&Origin>,
    keys: &KnownKeys,
) -> String {
    let table = &path[..path.len().saturating_sub(1)];
    let suggestion: Option<Vec<String>> = match closest(name, valid) {
        Some(closest) => Some(table.iter().cloned().chain([closest.to_owned()]).collect()),
        None => keys.elsewhere(name, table).map(<[String]>::to_vec),
    };
    let mut why = "unknown key".to_owned();
    if let Some(suggested) = suggestion
        && let Some((last, suggested_table)) = suggested.split_last()
    {
        let spelled = match origin {
            Some(Origin::Env(_)) => env_var(&suggested),
            _ if suggested_table == table => last.clone(),
            _ if suggested_table.is_empty() => format!("{last} (at the top level)"),
            _ => format!("{last} under [{}]", suggested_table.join(".")),
        };
        why.push_str(&format!("; did you mean {spelled}?"));
    } else {
        why.push('.');
    }
    let place = if table.is_empty() {
        "The top-level keys are".to_owned()
    } else {
        format!("The keys of [{}] are", table.join("."))
    };
    why.push_str(&format!(" {place} {}.", readable_list(valid)));
    why
}

/// The valid name nearest to `name`, if it is near enough to be a typo.
fn closest<'a>(name: &str, valid: &[&'a str]) -> Option<&'a str> {
    let name = name.to_ascii_lowercase();
    valid
        .iter()
        .map(|candidate| (edit_distance(&name, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= (candidate.len() / 3).max(2))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

fn readable_list(names: &[&str]) -> String {
    match names {
        [] => "(none)".to_owned(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// What was given, as the person wrote it.
fn found(actual: &Actual) -> String {
    match actual {
        Actual::Bool(b) => b.to_string(),
        Actual::Unsigned(n) => n.to_string(),
        Actual::Signed(n) => n.to_string(),
        Actual::Float(n) => n.to_string(),
        Actual::Char(c) => format!("{:?}", c.to_string()),
        Actual::Str(s) => format!("{s:?}"),
        Actual::Seq => "a list".to_owned(),
        Actual::Map => "a table".to_owned(),
        Actual::Unit | Actual::Option => "an empty value".to_owned(),
        other => other.to_string(),
    }
}

/// What the key takes, with an example, judged from its default (a duration, a number, a
/// switch, a string, a list) or, for keys without one, from what the deserializer expected.
fn wanted(
    default: Option<&Value>,
    expected: &str,
    origin: Option<&Origin>,
    path: &[String],
) -> String {
    let quoted = |example: &str| match origin {
        Some(Origin::Env(var)) => format!("{var}={example}"),
        _ => format!("{example:?}"),
    };
    match default {
        Some(Value::String(_, s)) if humantime::parse_duration(s).is_ok() => match origin {
            Some(Origin::Env(var)) => {
                format!("a duration; write a number and a unit, e.g. {var}=30s (or 10m, 1h)")
            }
            _ => "a duration; write it in quotes, e.g. \"30s\", \"10m\" or \"1h\"".to_owned(),
        },
        Some(Value::String(_, s)) if !s.is_empty() => {
            format!("a string; write e.g. {}", quoted(s))
        }
        Some(Value::Num(_, n)) => format!(
            "a whole number of 0 or more; write e.g. {}",
            match origin {
                Some(Origin::Env(var)) => format!("{var}={}", n.to_u128().unwrap_or(0)),
                _ => n.to_u128().unwrap_or(0).to_string(),
            }
        ),
        Some(Value::Bool(_, b)) => format!(
            "true or false; write e.g. {}",
            match origin {
                Some(Origin::Env(var)) => format!("{var}={b}"),
                _ => b.to_string(),
            }
        ),
        Some(Value::Array(..)) => "a list; write it in brackets, e.g. [\"a\", \"b\"]".to_owned(),
        Some(Value::Dict(..)) => format!("a table; write it as [{}]", path.join(".")),
        _ if expected.contains("string") => "a string; write it in quotes".to_owned(),
        _ if expected.contains("map") => format!("a table; write it as [{}]", path.join(".")),
        _ if expected.contains("sequence") => {
            "a list; write it in brackets, e.g. [\"a\", \"b\"]".to_owned()
        }
        _ if expected.contains("bool") => "true or false".to_owned(),
        // A key with no default (an optional number, such as
        // session.max_sessions_per_caller).
        _ if expected.starts_with('u') => "a whole number of 0 or more".to_owned(),
        _ if expected.starts_with('i') => "a whole number".to_owned(),
        _ => expected.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use figment::providers::{Format, Toml};
    use figment::value::{Dict, Map};
    use figment::{Figment, Metadata, Profile, Provider};

    use super::Origin;

    /// A layer named as the environment's is (its name holds the prefix).
    struct FromEnv(&'static str);

    impl Provider for FromEnv {
        fn metadata(&self) -> Metadata {
            Metadata::named("`MCP_PROXY_` environment variables")
        }

        fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
            Toml::string(self.0).data()
        }
    }

    #[test]
    fn a_value_inside_a_list_is_named_by_the_lists_variable() {
        let figment = Figment::new().merge(FromEnv(
            "[auth]\nlimits = [{ rate = 1 }]\n[upstreams.2024]\nurl = \"x\"\n",
        ));
        let var = |key: &str| match Origin::of_key(&figment, key) {
            Some(Origin::Env(var)) => var,
            other => panic!("{key}: {other:?}"),
        };
        assert_eq!(var("auth.limits[0].rate"), "MCP_PROXY_AUTH__LIMITS");
        assert_eq!(var("upstreams.2024.url"), "MCP_PROXY_UPSTREAMS__2024__URL");
    }
}
