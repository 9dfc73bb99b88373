//! Who may use what (`[[auth.rules]]`): rules per upstream and per tool, prompt and
//! resource, allowing callers by the verified token's scopes and claims. With no rule
//! at all everything is allowed (as before rules existed); with rules, what no rule
//! allows is denied.
//!
//! A rule names an upstream (or `*`), and optionally the tools, prompts and resources
//! it covers (names, or a prefix ending in `*`; resources by URI); a rule that names
//! none covers everything of its upstream. It allows a caller whose token carries all
//! its `scopes` and, for each of its `claims`, that value (a string claim equal to it,
//! or a list claim containing it). Reaching an upstream at all (listing, pinging,
//! opening a session) takes any rule of that upstream that allows the caller; using a
//! tool, prompt or resource takes a rule that covers it and allows the caller.

use super::Verified;

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The upstream's name, or `*`.
    pub upstream: String,
    /// Names or `prefix*` patterns; all three empty: the whole upstream.
    pub tools: Vec<String>,
    pub prompts: Vec<String>,
    pub resources: Vec<String>,
    /// Every one must be among the token's scopes.
    pub scopes: Vec<String>,
    /// Claim name and the value it must hold.
    pub claims: Vec<(String, String)>,
}

/// What a request uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item<'a> {
    /// The upstream itself (any request to it).
    Upstream,
    Tool(&'a str),
    Prompt(&'a str),
    Resource(&'a str),
}

impl Item<'_> {
    /// A fixed word for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Item::Upstream => "upstream",
            Item::Tool(_) => "tool",
            Item::Prompt(_) => "prompt",
            Item::Resource(_) => "resource",
        }
    }
}

/// The rules, in the order written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    rules: Vec<Rule>,
}

impl Policy {
    pub fn new(rules: Vec<Rule>) -> Policy {
        Policy { rules }
    }

    /// Whether there are rules (else everything is allowed, and nothing checked).
    pub fn is_active(&self) -> bool {
        !self.rules.is_empty()
    }

    /// The claims the rules read (the verifier keeps those of each token).
    pub fn claim_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .rules
            .iter()
            .flat_map(|rule| rule.claims.iter().map(|(name, _)| name.clone()))
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Whether `who` may use anything of a `kind` (`tool`, `prompt`, `resource`) of the
    /// upstream named `upstream`: some rule admitting it covers the whole upstream or
    /// names items of that kind.
    pub fn may_use_some(&self, upstream: &str, kind: &str, who: &Verified) -> bool {
        if !self.is_active() {
            return true;
        }
        self.rules
            .iter()
            .filter(|rule| rule.upstream == "*" || rule.upstream == upstream)
            .filter(|rule| rule.admits(who))
            .any(|rule| {
                let whole =
                    rule.tools.is_empty() && rule.prompts.is_empty() && rule.resources.is_empty();
                whole
                    || match kind {
                        "tool" => !rule.tools.is_empty(),
                        "prompt" => !rule.prompts.is_empty(),
                        _ => !rule.resources.is_empty(),
                    }
            })
    }

    /// Whether `who` may use `item` of the upstream named `upstream`.
    pub fn allows(&self, upstream: &str, item: Item<'_>, who: &Verified) -> bool {
        if !self.is_active() {
            return true;
        }
        self.rules
            .iter()
            .filter(|rule| rule.upstream == "*" || rule.upstream == upstream)
            .filter(|rule| rule.covers(item))
            .any(|rule| rule.admits(who))
    }
}

impl Rule {
    fn covers(&self, item: Item<'_>) -> bool {
        let whole = self.tools.is_empty() && self.prompts.is_empty() && self.resources.is_empty();
        match item {
            Item::Upstream => true,
            _ if whole => true,
            Item::Tool(name) => self.tools.iter().any(|p| matches(p, name)),
            Item::Prompt(name) => self.prompts.iter().any(|p| matches(p, name)),
            // A URI that climbs out of a prefix (`/public/../secret`) is covered only by
            // a rule that names it whole.
            Item::Resource(uri) if climbs(uri) => self.resources.iter().any(|p| p == uri),
            Item::Resource(uri) => self.resources.iter().any(|p| matches(p, uri)),
        }
    }

    fn admits(&self, who: &Verified) -> bool {
        self.scopes.iter().all(|scope| who.scopes.contains(scope))
            && self.claims.iter().all(|(name, wanted)| {
                who.claims
                    .iter()
                    .any(|(claim, values)| claim == name && values.contains(wanted))
            })
    }
}

/// Whether `uri` has a dot segment (`..`, also percent-encoded), which a server may
/// resolve to somewhere its text does not start with.
fn climbs(uri: &str) -> bool {
    let lower = uri.to_ascii_lowercase();
    lower.contains("/..")
        || lower.contains("%2e%2e")
        || lower.contains(".%2e")
        || lower.contains("%2e.")
}

/// Whether `name` is `pattern`, or starts with a `pattern` ending in `*`.
pub(super) fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::caller::Caller;

    fn who(scopes: &[&str], claims: &[(&str, &[&str])]) -> Verified {
        Verified {
            caller: Caller::subject("https://auth.example.com/", "x"),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            claims: claims
                .iter()
                .map(|(name, values)| {
                    (
                        name.to_string(),
                        values.iter().map(|v| v.to_string()).collect(),
                    )
                })
                .collect(),
        }
    }

    fn rule(upstream: &str, tools: &[&str], scopes: &[&str]) -> Rule {
        Rule {
            upstream: upstream.into(),
            tools: tools.iter().map(|s| s.to_string()).collect(),
            prompts: Vec::new(),
            resources: Vec::new(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            claims: Vec::new(),
        }
    }

    #[test]
    fn without_rules_everything_is_allowed_and_with_them_only_what_one_allows() {
        let anyone = who(&[], &[]);
        assert!(Policy::default().allows("github", Item::Tool("delete_repo"), &anyone));
        let policy = Policy::new(vec![
            rule("*", &["search", "get_*"], &["tools:read"]),
            rule("github", &["delete_*"], &["tools:admin"]),
        ]);
        let reader = who(&["tools:read"], &[]);
        let admin = who(&["tools:read", "tools:admin"], &[]);
        assert!(policy.allows("github", Item::Tool("search"), &reader));
        assert!(policy.allows("github", Item::Tool("get_issue"), &reader));
        assert!(!policy.allows("github", Item::Tool("delete_repo"), &reader));
        assert!(policy.allows("github", Item::Tool("delete_repo"), &admin));
        assert!(
            !policy.allows("other", Item::Tool("delete_repo"), &admin),
            "a rule of another upstream"
        );
        assert!(
            !policy.allows("github", Item::Tool("create_issue"), &admin),
            "no rule covers it"
        );
        assert!(
            !policy.allows("github", Item::Prompt("summarize"), &admin),
            "rules naming tools cover no prompt"
        );
        assert!(policy.allows("github", Item::Upstream, &reader));
        assert!(!policy.allows("github", Item::Upstream, &anyone));
        assert!(policy.may_use_some("github", "tool", &reader));
        assert!(
            !policy.may_use_some("github", "prompt", &reader),
            "its rules name tools only"
        );
        assert!(!policy.may_use_some("github", "tool", &anyone));
    }

    #[test]
    fn a_uri_that_climbs_out_of_a_prefix_is_not_covered_by_it() {
        let mut public = rule("*", &[], &[]);
        public.resources = vec!["file:///public/*".into()];
        let policy = Policy::new(vec![public]);
        let anyone = who(&[], &[]);
        assert!(policy.allows("x", Item::Resource("file:///public/a.txt"), &anyone));
        for sneaky in [
            "file:///public/../secret",
            "file:///public/%2E%2E/secret",
            "file:///public/.%2e/x",
        ] {
            assert!(
                !policy.allows("x", Item::Resource(sneaky), &anyone),
                "{sneaky}"
            );
        }
    }

    #[test]
    fn a_rule_naming_nothing_covers_its_whole_upstream_and_claims_must_hold() {
        let mut ops = rule("internal", &[], &[]);
        ops.claims = vec![("groups".into(), "ops".into())];
        let policy = Policy::new(vec![ops]);
        assert_eq!(policy.claim_names(), ["groups"]);
        let member = who(&[], &[("groups", &["dev", "ops"])]);
        let outsider = who(&[], &[("groups", &["dev"])]);
        for item in [
            Item::Upstream,
            Item::Tool("anything"),
            Item::Prompt("p"),
            Item::Resource("file:///x"),
        ] {
            assert!(policy.allows("internal", item, &member), "{item:?}");
            assert!(!policy.allows("internal", item, &outsider), "{item:?}");
        }
    }
}
