//! The environment a stdio child gets: never the proxy's own.
//!
//! A stdio server is often third-party code, and the proxy's environment holds its own
//! secrets (`MCP_PROXY_SESSION__STATE_KEY`, `…__SEALED_KEYS` — with which a child could
//! forge session ids —, `MCP_PROXY_ADMIN__TOKEN`, `MCP_PROXY_AUTH__HS256_SECRET`, a Redis
//! URL with its password) and whatever else the operator's shell or service manager put
//! there. So a child starts from an empty environment and gets, later wins:
//!
//! 1. [`BASE`]: what any program needs to find its tools and run in the right locale and
//!    home (`PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL`, `LANG`, `LANGUAGE`, `LC_*`, `TZ`,
//!    `TMPDIR`), taken from the proxy's environment when set there. Node (`npx`) needs
//!    `PATH` and `HOME` (its cache); Python needs nothing more.
//! 2. `upstream.inherit_env`: the names the operator asks to pass as the proxy has them
//!    (e.g. `HTTPS_PROXY`, `NODE_EXTRA_CA_CERTS`); `MCP_PROXY_*` is refused there by the
//!    configuration.
//! 3. `upstream.env`: the values the configuration gives.
//!
//! Knows nothing of processes: a pure function of the proxy's environment and the
//! command's settings.

use std::ffi::{OsStr, OsString};

use super::CommandSpec;

/// The proxy's variables every child gets, when set (plus every `LC_*`: [`is_base`]).
pub const BASE: [&str; 9] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
];

/// The prefix of the proxy's own settings (case-insensitive, as the proxy reads them).
const PROXY_PREFIX: &str = "MCP_PROXY_";

/// Whether `name` is one of the proxy's own settings, which no child inherits whatever
/// `inherit_env` says (the configuration refuses such names too).
pub fn is_proxy_setting(name: &str) -> bool {
    name.get(..PROXY_PREFIX.len())
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(PROXY_PREFIX))
}

/// Whether the proxy's variable `name` is one every child gets.
fn is_base(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    BASE.contains(&name) || name.starts_with("LC_")
}

/// The environment of a child of `spec`, from the proxy's environment `proxy` (see the
/// module documentation), in the order it is set (a later duplicate wins).
pub fn for_child(
    spec: &CommandSpec,
    proxy: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = proxy
        .into_iter()
        .filter(|(name, _)| {
            let wanted = spec
                .inherit_env
                .iter()
                .any(|wanted| name == wanted.as_str());
            is_base(name) || (wanted && !name.to_str().is_some_and(is_proxy_setting))
        })
        .collect();
    env.extend(
        spec.env
            .iter()
            .map(|(name, value)| (OsString::from(name), OsString::from(value))),
    );
    env
}

/// The `PATH` a child of `spec` gets (where its program is looked up).
pub fn path_of(env: &[(OsString, OsString)]) -> Option<OsString> {
    env.iter()
        .rev()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(inherit: &[&str], env: &[(&str, &str)]) -> CommandSpec {
        CommandSpec {
            program: "server".to_owned(),
            args: Vec::new(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            inherit_env: inherit.iter().map(|name| (*name).to_owned()).collect(),
            cwd: None,
        }
    }

    fn proxy(vars: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        vars.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<&str> {
        env.iter().map(|(k, _)| k.to_str().unwrap()).collect()
    }

    #[test]
    fn a_child_gets_the_base_and_what_it_is_given_never_the_proxys_settings() {
        let proxy = proxy(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/home/proxy"),
            ("LC_ALL", "C.UTF-8"),
            ("MCP_PROXY_SESSION__STATE_KEY", "00ff"),
            ("MCP_PROXY_ADMIN__TOKEN", "secret-token"),
            ("DATABASE_PASSWORD", "hunter2"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("RUST_LOG", "debug"),
        ]);
        let env = for_child(&spec(&["HTTPS_PROXY"], &[("API_KEY", "k")]), proxy);
        assert_eq!(
            names(&env),
            ["PATH", "HOME", "LC_ALL", "HTTPS_PROXY", "API_KEY"]
        );
        assert_eq!(path_of(&env), Some(OsString::from("/usr/bin")));
    }

    #[test]
    fn the_configured_values_win() {
        let proxy = proxy(&[("PATH", "/usr/bin"), ("TZ", "UTC")]);
        let env = for_child(&spec(&[], &[("PATH", "/opt/server/bin")]), proxy);
        assert_eq!(path_of(&env), Some(OsString::from("/opt/server/bin")));
        // Set in order, so the configured PATH (last) is the one the child sees.
        assert_eq!(names(&env), ["PATH", "TZ", "PATH"]);
    }

    #[test]
    fn the_proxys_settings_are_never_inherited_even_when_asked_for() {
        let proxy = proxy(&[("MCP_PROXY_ADMIN__TOKEN", "t"), ("mcp_proxy_x", "y")]);
        let asked = spec(&["MCP_PROXY_ADMIN__TOKEN", "mcp_proxy_x"], &[]);
        assert!(for_child(&asked, proxy).is_empty());
        assert!(is_proxy_setting("Mcp_Proxy_SESSION__STATE_KEY"));
        assert!(!is_proxy_setting("MCP_PROXY"));
    }

    #[test]
    fn names_match_exactly() {
        let proxy = proxy(&[("PATHS", "x"), ("path", "y"), ("XLC_ALL", "z")]);
        assert!(for_child(&spec(&["PAT"], &[]), proxy).is_empty());
    }
}
