use std::io::Write;

use super::*;

/// An environment layer that no variable of the test process can match.
fn no_env() -> Env {
    Env::prefixed("MCP_PROXY_UNIT_TEST_NOTHING_")
}

fn file(contents: &str) -> tempfile_path::TempFile {
    tempfile_path::TempFile::new(contents)
}

mod tempfile_path {
    use std::path::PathBuf;

    pub struct TempFile(pub PathBuf);

    impl TempFile {
        pub fn new(contents: &str) -> Self {
            let mut bytes = [0u8; 8];
            rand::fill(&mut bytes);
            let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let path = std::env::temp_dir().join(format!("mcp-proxy-config-{name}.toml"));
            let mut file = std::fs::File::create(&path).unwrap();
            super::Write::write_all(&mut file, contents.as_bytes()).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

fn load_file(contents: &str, overrides: Overrides) -> Result<Config, ConfigError> {
    let f = file(contents);
    load_from(
        &Overrides {
            config_file: Some(f.0.clone()),
            ..overrides
        },
        no_env(),
    )
}

#[test]
fn the_defaults_are_valid() {
    let config = Config::defaults();
    assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(config.path, "/mcp");
    assert_eq!(config.max_body_bytes, 4 * 1024 * 1024);
    assert_eq!(config.session.idle_ttl, Duration::from_secs(30 * 60));
    assert!(config.upstream.target.url().is_none());
    assert!(!config.upstream.require_session);
}

#[test]
fn the_repository_proxy_toml_is_the_defaults() {
    let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/proxy.toml");
    let from_file = load_from(
        &Overrides {
            config_file: Some(repo.into()),
            ..Overrides::default()
        },
        no_env(),
    )
    .unwrap();
    let defaults = Config::defaults();
    assert_eq!(format!("{from_file:?}"), format!("{defaults:?}"));
}

#[test]
fn a_file_sets_values_and_flags_win_over_it() {
    let config = load_file(
        "listen = \"127.0.0.1:9000\"\n[upstream]\nurl = \"http://127.0.0.1:3001/mcp\"\nrequire_session = true\n[session]\nidle_ttl = \"90s\"\nstate_key = \"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\"\n",
        Overrides {
            listen: Some("127.0.0.1:9100".into()),
            ..Overrides::default()
        },
    )
    .unwrap();
    assert_eq!(config.listen.to_string(), "127.0.0.1:9100");
    assert_eq!(
        config.upstream.target.url().unwrap().to_string(),
        "http://127.0.0.1:3001/mcp"
    );
    assert!(config.upstream.require_session);
    assert_eq!(config.session.idle_ttl, Duration::from_secs(90));
    assert_eq!(config.session.state_key.unwrap().0.len(), 32);
}

#[test]
fn bad_values_name_their_keys() {
    let err = load_file(
        "listen = \"nowhere\"\nmax_body_bytes = 3\n[session]\nidle_ttl = \"soon\"\nstate_key = \"abc\"\n[upstream]\nurl = \"ftp://x\"\n[log]\nformat = \"xml\"\n",
        Overrides::default(),
    )
    .unwrap_err();
    let text = err.to_string();
    for key in [
        "listen:",
        "max_body_bytes:",
        "session.idle_ttl:",
        "session.state_key:",
        "upstream.url:",
        "log.format:",
    ] {
        assert!(text.contains(key), "{key} missing from: {text}");
    }
    assert_eq!(err.problems.len(), 6);
}

#[test]
fn unknown_keys_and_wrong_types_are_refused() {
    let err = load_file("[session]\nidel_ttl = \"5m\"\n", Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("idel_ttl"), "{err}");
    let err = load_file("max_body_bytes = \"big\"\n", Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("max_body_bytes"), "{err}");
}

#[test]
fn https_upstreams_are_refused_with_a_reason() {
    let err = load_file(
        "[upstream]\nurl = \"https://example.com/mcp\"\n",
        Overrides::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("https upstreams are not supported"),
        "{err}"
    );
}

#[test]
fn a_missing_config_file_is_an_error() {
    let err = load_from(
        &Overrides {
            config_file: Some("/nonexistent/proxy.toml".into()),
            ..Overrides::default()
        },
        no_env(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("--config"), "{err}");
}

#[test]
fn the_mcp_path_cannot_take_the_health_path() {
    let err = load_file("path = \"/healthz\"\n", Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("path:"), "{err}");
}

#[test]
fn an_upstream_on_the_command_line_replaces_the_configured_kind() {
    let stdio = "[upstream]\ncommand = \"node\"\nargs = [\"server.js\"]\n";
    let config = load_file(
        stdio,
        Overrides {
            upstream: Some("http://127.0.0.1:3001/mcp".into()),
            ..Overrides::default()
        },
    )
    .unwrap();
    assert_eq!(
        config.upstream.target.url().unwrap().to_string(),
        "http://127.0.0.1:3001/mcp"
    );
    assert!(config.upstream.target.command().is_none());

    let http = "[upstream]\nurl = \"http://127.0.0.1:3001/mcp\"\n";
    let config = load_file(
        http,
        Overrides {
            command: vec!["python3".into(), "server.py".into()],
            ..Overrides::default()
        },
    )
    .unwrap();
    assert!(config.upstream.target.url().is_none());
    let command = config.upstream.target.command().unwrap();
    assert_eq!(command.program, "python3");
    assert_eq!(command.args, ["server.py"]);
}

#[test]
fn durations_past_a_year_are_refused() {
    let err = load_file(
        "[session]\nidle_ttl = \"20000years\"\n",
        Overrides::default(),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("session.idle_ttl"), "{text}");
    assert!(text.contains("too long"), "{text}");
}

const KEY_A: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const KEY_B: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

#[test]
fn named_upstreams_are_served_with_their_overrides() {
    let config = load_file(
        "[upstream]\ntimeout = \"20s\"\nhealth_interval = \"3s\"\n\
         [upstreams.alpha]\ndefault = true\nurls = [\"http://127.0.0.1:3001/mcp\", \"http://127.0.0.1:3002/mcp\"]\ntimeout = \"5s\"\non_session_lost = \"reinitialize\"\n\
         [upstreams.beta]\ncommand = \"node\"\nargs = [\"server.js\"]\nmax_children = 7\n",
        Overrides::default(),
    )
    .unwrap();
    let set = config.upstream_set();
    assert_eq!(set.len(), 2);
    let alpha = set.iter().find(|u| u.name == "alpha").unwrap();
    assert!(alpha.default);
    let Target::Http(urls) = &alpha.config.target else {
        panic!("alpha is HTTP: {:?}", alpha.config.target)
    };
    assert_eq!(urls.len(), 2);
    assert_eq!(alpha.config.timeout, Duration::from_secs(5));
    assert_eq!(alpha.config.health_interval, Duration::from_secs(3));
    assert_eq!(alpha.config.on_session_lost, OnSessionLost::Reinitialize);
    let beta = set.iter().find(|u| u.name == "beta").unwrap();
    assert!(!beta.default);
    assert_eq!(beta.config.target.command().unwrap().program, "node");
    assert_eq!(beta.config.max_children, 7);
    assert_eq!(beta.config.timeout, Duration::from_secs(20), "inherited");
    assert_eq!(beta.config.on_session_lost, OnSessionLost::Fail);
}

#[test]
fn the_one_upstream_keys_define_the_default_upstream_beside_named_ones() {
    let config = load_file(
        "[upstreams.alpha]\nurl = \"http://127.0.0.1:3001/mcp\"\n",
        Overrides {
            upstream: Some("http://127.0.0.1:4000/mcp".into()),
            ..Overrides::default()
        },
    )
    .unwrap();
    let set = config.upstream_set();
    let names: Vec<(&str, bool)> = set.iter().map(|u| (u.name.as_str(), u.default)).collect();
    assert_eq!(names, [(DEFAULT_UPSTREAM, true), ("alpha", false)]);
    // Alone, a named upstream is the default.
    let alone = load_file(
        "[upstreams.alpha]\nurl = \"http://127.0.0.1:3001/mcp\"\n",
        Overrides::default(),
    )
    .unwrap();
    let set = alone.upstream_set();
    assert_eq!(set.len(), 1);
    assert!(set[0].default);
}

#[test]
fn upstream_tables_are_checked_key_by_key() {
    let err = load_file(
        "[upstreams.\"bad name\"]\nurl = \"http://127.0.0.1:1/mcp\"\n\
         [upstreams.a]\nurl = \"http://127.0.0.1:1/mcp\"\nurls = [\"http://127.0.0.1:2/mcp\"]\n\
         [upstreams.b]\nurls = [\"http://127.0.0.1:2/mcp\", \"http://127.0.0.1:2/mcp\"]\non_session_lost = \"retry\"\n\
         [upstreams.c]\nargs = [\"x\"]\n",
        Overrides::default(),
    )
    .unwrap_err();
    let text = err.to_string();
    for key in [
        "upstreams.bad name:",
        "upstreams.a:",
        "upstreams.b.urls[1]:",
        "upstreams.b.on_session_lost:",
        "upstreams.c:",
        "upstreams.c.args:",
        "upstreams:",
    ] {
        assert!(text.contains(key), "{key} missing from: {text}");
    }
}

#[test]
fn two_defaults_or_none_among_several_are_refused() {
    let two = "[upstreams.a]\ndefault = true\nurl = \"http://127.0.0.1:1/mcp\"\n[upstreams.b]\ndefault = true\nurl = \"http://127.0.0.1:2/mcp\"\n";
    assert!(
        load_file(two, Overrides::default())
            .unwrap_err()
            .to_string()
            .contains("only one upstream")
    );
    let none = "[upstreams.a]\nurl = \"http://127.0.0.1:1/mcp\"\n[upstreams.b]\nurl = \"http://127.0.0.1:2/mcp\"\n";
    assert!(
        load_file(none, Overrides::default())
            .unwrap_err()
            .to_string()
            .contains("default = true")
    );
    let taken = "[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\n[upstreams.b]\ndefault = true\nurl = \"http://127.0.0.1:2/mcp\"\n";
    assert!(
        load_file(taken, Overrides::default())
            .unwrap_err()
            .to_string()
            .contains("upstreams.b.default")
    );
}

#[test]
fn the_stores_and_what_they_need() {
    let memory = Config::defaults();
    assert_eq!(memory.session.store, StoreConfig::Memory);

    let redis = load_file(
        &format!("[session]\nstore = \"redis\"\nredis_url = \"redis://127.0.0.1:6379/0\"\nstate_key = \"{KEY_A}\"\n"),
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(
        redis.session.store,
        StoreConfig::Redis {
            url: "redis://127.0.0.1:6379/0".into()
        }
    );
    let err = load_file("[session]\nstore = \"redis\"\n", Overrides::default()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("session.redis_url") && text.contains("session.state_key"),
        "{text}"
    );

    let sealed = load_file(
        &format!("[session]\nstore = \"sealed\"\nsealed_keys = [\"{KEY_A}\", \"{KEY_B}\"]\n"),
        Overrides::default(),
    )
    .unwrap();
    let StoreConfig::Sealed { keys } = &sealed.session.store else {
        panic!("{:?}", sealed.session.store)
    };
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0].0[0], 0x00);
    assert_eq!(keys[1].0[0], 0xff);
    let err = load_file(
        "[session]\nstore = \"sealed\"\nsealed_keys = [\"abc\"]\n[upstream]\non_session_lost = \"reinitialize\"\n",
        Overrides::default(),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("session.sealed_keys[0]") && text.contains("reinitialize"),
        "{text}"
    );
    let err = load_file("[session]\nstore = \"disk\"\n", Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("session.store"), "{err}");
}

#[test]
fn cluster_advertise_must_be_an_http_base_url() {
    let config = load_file(
        "[cluster]\nadvertise = \"http://10.0.0.5:8080/\"\n",
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(
        config.cluster.advertise.as_deref(),
        Some("http://10.0.0.5:8080")
    );
    let err = load_file(
        "[cluster]\nadvertise = \"10.0.0.5\"\n",
        Overrides::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("cluster.advertise"), "{err}");
}
