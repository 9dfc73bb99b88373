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

/// The key each problem names, in order (a problem starts with its key path).
fn problem_keys(err: &ConfigError) -> Vec<&str> {
    err.problems
        .iter()
        .map(|p| p.split(' ').next().unwrap())
        .collect()
}

#[test]
fn bad_values_name_their_keys() {
    let err = load_file(
        "listen = \"nowhere\"\nmax_body_bytes = 3\n[session]\nidle_ttl = \"soon\"\nstate_key = \"abc\"\n[upstream]\nurl = \"ftp://x\"\n[log]\nformat = \"xml\"\n",
        Overrides::default(),
    )
    .unwrap_err();
    let keys = problem_keys(&err);
    assert_eq!(
        keys,
        [
            "listen",
            "log.format",
            "max_body_bytes",
            "session.idle_ttl",
            "session.state_key",
            "upstream.url"
        ],
        "{err}"
    );
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

/// Credentials in an upstream URL would be sent as its `Host` and logged with the URL:
/// refused, and not repeated in the refusal.
#[test]
fn credentials_in_an_upstream_url_are_refused_unrepeated() {
    for url in [
        "http://user:s3cret@127.0.0.1:3001/mcp",
        "http://s3cret@example.com/mcp",
    ] {
        let err = load_file(
            &format!("[upstream]\nurl = \"{url}\"\n"),
            Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("upstream.credentials"), "{err}");
        assert!(!err.contains("s3cret"), "the secret is repeated: {err}");
    }
    // An `@` in the path is no credential.
    let config = load_file(
        "[upstream]\nurl = \"http://127.0.0.1:3001/mcp/@team\"\n",
        Overrides::default(),
    );
    assert!(config.is_ok(), "{:?}", config.err().map(|e| e.to_string()));
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
    assert!(err.problems[0].starts_with("path ("), "{err}");
    assert!(
        err.problems[0].ends_with("/healthz is reserved for health checks"),
        "{err}"
    );
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
        "upstreams.bad name (in ",
        "upstreams.a (in ",
        "upstreams.b.urls[1] (in ",
        "upstreams.b.on_session_lost (in ",
        "upstreams.c (in ",
        "upstreams.c.args (in ",
        "upstreams (in ",
    ] {
        assert!(text.contains(key), "{key} missing from: {text}");
    }
}

#[test]
fn a_child_inherits_only_named_variables_and_never_the_proxys_settings() {
    let config = load_file(
        "[upstream]\ncommand = \"server\"\ninherit_env = [\"HTTPS_PROXY\"]\n\
         [upstreams.b]\ncommand = \"other\"\ninherit_env = [\"NODE_EXTRA_CA_CERTS\"]\n",
        Overrides::default(),
    )
    .unwrap();
    let inherited = |name: &str| {
        let set = config.upstream_set();
        let upstream = set.iter().find(|u| u.name == name).unwrap();
        upstream
            .config
            .target
            .command()
            .unwrap()
            .inherit_env
            .clone()
    };
    assert_eq!(inherited("default"), ["HTTPS_PROXY"]);
    assert_eq!(inherited("b"), ["NODE_EXTRA_CA_CERTS"]);
    let problems = problems_of(
        "[upstream]\ncommand = \"server\"\n\
         inherit_env = [\"MCP_PROXY_ADMIN__TOKEN\", \"mcp_proxy_session__state_key\", \"A=B\", \"\"]\n\
         [upstreams.b]\nurl = \"http://127.0.0.1:1/mcp\"\ninherit_env = [\"HOME\"]\n",
    );
    assert_eq!(
        problems,
        [
            "upstream.inherit_env[0] (in FILE): MCP_PROXY_ADMIN__TOKEN is one of the proxy's own \
             settings, which a child never inherits; give the child a value of its own in env \
             instead",
            "upstream.inherit_env[1] (in FILE): mcp_proxy_session__state_key is one of the \
             proxy's own settings, which a child never inherits; give the child a value of its \
             own in env instead",
            "upstream.inherit_env[2] (in FILE): \"A=B\" is not the name of an environment variable",
            "upstream.inherit_env[3] (in FILE): \"\" is not the name of an environment variable",
            "upstreams.b.inherit_env (in FILE): variables for a child without upstreams.b.command",
        ]
    );
}

#[test]
fn two_defaults_or_none_among_several_are_refused() {
    let two = "[upstreams.a]\ndefault = true\nurl = \"http://127.0.0.1:1/mcp\"\n[upstreams.b]\ndefault = true\nurl = \"http://127.0.0.1:2/mcp\"\n";
    let none = "[upstreams.a]\nurl = \"http://127.0.0.1:1/mcp\"\n[upstreams.b]\nurl = \"http://127.0.0.1:2/mcp\"\n";
    let taken = "[upstream]\nurl = \"http://127.0.0.1:1/mcp\"\n[upstreams.b]\ndefault = true\nurl = \"http://127.0.0.1:2/mcp\"\n";
    for (toml, says) in [
        (two, "only one upstream"),
        (none, "default = true"),
        (taken, "upstreams.b.default"),
    ] {
        let text = load_file(toml, Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(text.contains(says), "{text}");
    }
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
    let StoreConfig::Redis(one) = &redis.session.store else {
        panic!("{:?}", redis.session.store)
    };
    assert_eq!(
        one.servers,
        RedisServers::Server {
            url: "redis://127.0.0.1:6379/0".into()
        }
    );
    // One server: nothing waits for replicas unless asked.
    assert_eq!(
        (one.wait_replicas, one.timeout, one.wait_timeout),
        (0, Duration::from_secs(1), Duration::from_millis(100))
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
fn redis_sentinels_name_the_primary_and_its_credentials() {
    let config = load_file(
        &format!(
            "[session]\nstore = \"redis\"\nstate_key = \"{KEY_A}\"\n\
             redis_sentinels = [\"redis://10.0.0.1:26379\", \"redis://:sentinel-secret@10.0.0.2:26379\"]\n\
             redis_master_name = \"sessions\"\nredis_username = \"proxy\"\nredis_password = \"hunter2\"\n\
             redis_db = 3\nredis_timeout = \"2s\"\n"
        ),
        Overrides::default(),
    )
    .unwrap();
    let StoreConfig::Redis(redis) = &config.session.store else {
        panic!("{:?}", config.session.store)
    };
    assert_eq!(
        redis.servers,
        RedisServers::Sentinel {
            sentinels: vec![
                "redis://10.0.0.1:26379".into(),
                "redis://:sentinel-secret@10.0.0.2:26379".into()
            ],
            master_name: "sessions".into(),
        }
    );
    assert_eq!(redis.username.as_deref(), Some("proxy"));
    assert_eq!(redis.password, Some(Secret(b"hunter2".to_vec())));
    assert_eq!((redis.db, redis.timeout), (3, Duration::from_secs(2)));
    // With sentinels a creation waits for one replica by default.
    assert_eq!(
        (redis.wait_replicas, redis.wait_timeout),
        (1, Duration::from_millis(100))
    );
    // Neither password is ever printed.
    let printed = format!("{:?}", config.session.store);
    assert!(
        !printed.contains("hunter2") && !printed.contains("sentinel-secret"),
        "{printed}"
    );
}

#[test]
fn a_redis_url_is_printed_without_its_password() {
    assert_eq!(
        without_password("redis://proxy:s3cr:et@10.0.0.1:6379/2"),
        "redis://proxy:<hidden>@10.0.0.1:6379/2"
    );
    assert_eq!(
        without_password("redis://:pw@h:26379"),
        "redis://:<hidden>@h:26379"
    );
    assert_eq!(without_password("redis://h:6379/0"), "redis://h:6379/0");
    assert_eq!(without_password("not a url"), "not a url");
}

#[test]
fn a_redis_store_is_one_server_or_sentinels_and_says_what_is_missing() {
    let problems = |toml: &str| {
        let text = format!("[session]\nstore = \"redis\"\nstate_key = \"{KEY_A}\"\n{toml}");
        let mut text = load_file(&text, Overrides::default())
            .unwrap_err()
            .to_string();
        // Where each value was set (the temporary file's path) is left out.
        while let Some(start) = text.find(" (in /") {
            let end = start + text[start..].find(')').unwrap();
            text.replace_range(start..=end, "");
        }
        text
    };
    let both = problems(
        "redis_url = \"redis://h:6379\"\nredis_sentinels = [\"redis://s:26379\"]\nredis_master_name = \"m\"\n",
    );
    assert!(
        both.contains("session.redis_sentinels: give either session.redis_url"),
        "{both}"
    );
    let nameless = problems("redis_sentinels = [\"redis://s:26379\"]\n");
    assert!(
        nameless.contains("session.redis_master_name: session.redis_sentinels needs the name"),
        "{nameless}"
    );
    let bad = problems(
        "redis_sentinels = [\"redis://s:26379\", \"http://s:26379\", \"redis://:pw@s:26379/2\"]\nredis_master_name = \"m\"\n",
    );
    assert!(
        bad.contains("session.redis_sentinels[1]: \"http://s:26379\" must be a Redis URL")
            && bad.contains("session.redis_sentinels[2]: a sentinel has no databases")
            && !bad.contains("session.redis_sentinels[0]"),
        "{bad}"
    );
    let twice = problems(
        "redis_url = \"redis://u:pw@h:6379/0\"\nredis_password = \"other\"\nredis_db = 1\nredis_master_name = \"m\"\n",
    );
    assert!(
        twice.contains("session.redis_password: a password is already in session.redis_url")
            && twice.contains(
                "session.redis_db: with session.redis_url the database is the URL's path"
            )
            && twice.contains("session.redis_master_name: names the primary")
            && !twice.contains("pw@"),
        "{twice}"
    );
    let slow = problems(
        "redis_url = \"redis://h:6379\"\nredis_wait_replicas = 1\nredis_wait_timeout = \"2s\"\nredis_timeout = \"1s\"\n",
    );
    assert!(
        slow.contains(
            "session.redis_wait_timeout: 2s must be shorter than session.redis_timeout (1s)"
        ),
        "{slow}"
    );
    let tls = problems("redis_url = \"redis://h:notaport\"\n");
    assert!(
        tls.contains(
            "session.redis_url: \"redis://h:notaport\" is not a Redis URL this proxy can use"
        ),
        "{tls}"
    );
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

#[test]
fn a_wildcard_listen_with_shared_sessions_needs_an_advertised_address() {
    const KEY: &str = "5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1ed5ea1";
    let redis = format!(
        "listen = \"0.0.0.0:8080\"\n[session]\nstore = \"redis\"\nredis_url = \"redis://127.0.0.1:6379/0\"\nstate_key = \"{KEY}\"\n"
    );
    let sealed = format!(
        "listen = \"[::]:8080\"\n[session]\nstore = \"sealed\"\nsealed_keys = [\"{KEY}\"]\n"
    );
    for toml in [&redis, &sealed] {
        let err = load_file(toml, Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cluster.advertise") && err.contains("wildcard"),
            "{err}"
        );
        // With the address others reach it at, it is fine.
        let advertised = format!("{toml}[cluster]\nadvertise = \"http://10.0.0.5:8080\"\n");
        assert!(load_file(&advertised, Overrides::default()).is_ok());
    }
    // Sessions of this process alone: nobody else looks for it.
    assert!(load_file("listen = \"0.0.0.0:8080\"\n", Overrides::default()).is_ok());
    // Nor is a loopback listen refused: replicas on this host reach it.
    let loopback = redis.replace("0.0.0.0", "127.0.0.1");
    assert!(load_file(&loopback, Overrides::default()).is_ok());
}

#[test]
fn cluster_peers_are_base_urls_and_the_forwarding_cap_is_at_least_one() {
    let config = load_file(
        "[cluster]\npeers = [\"http://10.0.0.6:8080/\", \"http://10.0.0.7:8080\"]\nmax_forwarded_per_caller = 4\n",
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(
        config.cluster.peers,
        ["http://10.0.0.6:8080", "http://10.0.0.7:8080"]
    );
    assert_eq!(config.cluster.max_forwarded_per_caller, 4);
    let defaults = load_file("", Overrides::default()).unwrap();
    assert_eq!(defaults.cluster.max_forwarded_per_caller, 16);
    assert_eq!(defaults.session.max_tombstones, 100_000);
    let problems = problems_of(
        "[cluster]\npeers = [\"10.0.0.6\", \"https://10.0.0.7:8080\"]\nmax_forwarded_per_caller = 0\n",
    );
    assert_eq!(
        problems,
        [
            "cluster.max_forwarded_per_caller (in FILE): 0 is too small; the minimum is 1",
            "cluster.peers[0] (in FILE): \"10.0.0.6\" must be the http:// base URL other proxy replicas reach this one at, e.g. \"http://10.0.0.5:8080\"",
            "cluster.peers[1] (in FILE): \"https://10.0.0.7:8080\" must be the http:// base URL other proxy replicas reach this one at, e.g. \"http://10.0.0.5:8080\"",
        ]
    );
}

/// The problems of a file, with its path replaced by `FILE`.
fn problems_of(contents: &str) -> Vec<String> {
    let f = file(contents);
    let err = load_from(
        &Overrides {
            config_file: Some(f.0.clone()),
            ..Overrides::default()
        },
        no_env(),
    )
    .unwrap_err();
    let path = f.0.display().to_string();
    err.problems
        .iter()
        .map(|p| p.replace(&path, "FILE"))
        .collect()
}

#[test]
fn every_problem_of_a_file_is_reported_in_key_order() {
    // Types that do not fit stop a deserializer at the first; values that fit but are
    // wrong are checked afterwards: all of them are reported, at once.
    let problems = problems_of(
        "max_body_bytes = \"big\"\nlisten = \"nowhere\"\n[session]\nidel_ttl = \"5m\"\nreap_interval = -5\n[upstream]\ntimeout = \"soon\"\nrequire_session = \"yes\"\n",
    );
    assert_eq!(
        problems,
        [
            "listen (in FILE): \"nowhere\" is not a socket address; write e.g. \"127.0.0.1:8080\"",
            "max_body_bytes (in FILE): \"big\" is not a whole number of 0 or more; write e.g. 4194304",
            "session.idel_ttl (in FILE): unknown key; did you mean idle_ttl? The keys of [session] are idle_ttl, max_sessions, max_sessions_per_caller, creations_per_caller_per_minute, reap_interval, state_key, store, redis_url, redis_sentinels, redis_master_name, redis_username, redis_password, redis_db, redis_timeout, redis_wait_replicas, redis_wait_timeout, redis_cache_sessions, sealed_keys and max_tombstones.",
            "session.reap_interval (in FILE): -5 is not a duration; write it in quotes, e.g. \"30s\", \"10m\" or \"1h\"",
            "upstream.require_session (in FILE): \"yes\" is not true or false; write e.g. false",
            "upstream.timeout (in FILE): \"soon\" is not a duration; write a number and a unit, e.g. \"30s\", \"5m\" or \"1h\"",
        ]
    );
}

#[test]
fn unknown_keys_suggest_the_closest_and_list_the_valid_ones() {
    let problems = problems_of("idle_ttl = \"5m\"\n[stateles]\nmax_pooled = 1\n");
    let top = "The top-level keys are listen, path, max_body_bytes, allowed_origins, \
               shutdown_grace, workers, session, upstream, log, admin, stateless, upstreams, \
               cluster, limits, auth, upgrade and telemetry.";
    assert_eq!(
        problems,
        [
            format!(
                "idle_ttl (in FILE): unknown key; did you mean idle_ttl under [session]? {top}"
            ),
            format!("stateles (in FILE): unknown key; did you mean stateless? {top}"),
        ]
    );
    // Nothing near enough: no guess, only the list.
    let problems = problems_of("[log]\ncolour = true\n");
    assert_eq!(
        problems,
        ["log.colour (in FILE): unknown key. The keys of [log] are level and format."]
    );
}

#[test]
fn wrong_types_say_what_to_write() {
    let problems = problems_of(
        "allowed_origins = [\"https://a.example.com\", 5]\nworkers = true\n[session]\nidle_ttl = -5\n[upstream]\nenv = { A = \"x\", B = 5 }\nurl = 3\n",
    );
    assert_eq!(
        problems,
        [
            "allowed_origins[1] (in FILE): 5 is not a string; write it in quotes",
            "session.idle_ttl (in FILE): -5 is not a duration; write it in quotes, e.g. \"30s\", \"10m\" or \"1h\"",
            "upstream.env.B (in FILE): 5 is not a string; write it in quotes",
            "upstream.url (in FILE): 3 is not a string; write it in quotes",
            "workers (in FILE): true is not a whole number of 0 or more; write e.g. 0",
        ]
    );
    let problems = problems_of(
        "allowed_origins = \"https://a.example.com\"\n[upstream]\nargs = 1\nenv = \"x\"\n",
    );
    assert_eq!(
        problems,
        [
            "allowed_origins (in FILE): \"https://a.example.com\" is not a list; write it in brackets: [\"https://a.example.com\"]",
            "upstream.args (in FILE): 1 is not a list; write it in brackets, e.g. [\"a\", \"b\"]",
            "upstream.env (in FILE): \"x\" is not a table; write it as [upstream.env]",
        ]
    );
}

#[test]
fn flags_are_named_as_the_origin_of_their_values() {
    let err = load_from(
        &Overrides {
            listen: Some("nowhere".into()),
            log_format: Some("yaml".into()),
            ..Overrides::default()
        },
        no_env(),
    )
    .unwrap_err();
    assert_eq!(
        err.problems,
        [
            "listen (from --listen): \"nowhere\" is not a socket address; write e.g. \"127.0.0.1:8080\"",
            "log.format (from --log-format): \"yaml\" must be \"text\" or \"json\"",
        ]
    );
}

#[test]
fn an_upstream_url_and_a_stdio_command_together_are_refused() {
    let err = load_from(
        &Overrides {
            upstream: Some("http://127.0.0.1:3001/mcp".into()),
            command: vec!["npx".into(), "-y".into(), "server".into()],
            ..Overrides::default()
        },
        no_env(),
    )
    .unwrap_err();
    assert_eq!(
        err.problems,
        [
            "upstream: --upstream http://127.0.0.1:3001/mcp and the stdio command after `--` (npx -y server) both name the upstream; give one: --upstream URL for a Streamable HTTP server, or `-- COMMAND ARGS…` for a stdio server"
        ]
    );
}

#[test]
fn problems_found_after_reading_name_their_origin_too() {
    let problems = problems_of("allowed_origins = [\"https://ok.example.com\", \"nope\"]\n");
    assert_eq!(
        problems,
        [
            "allowed_origins[1] (in FILE): \"nope\" must be an origin like \"https://app.example.com\" (scheme, host, optional port, no path)"
        ]
    );
}

#[test]
fn a_file_that_is_not_toml_is_reported_with_its_excerpt() {
    let problems = problems_of("listen = \"x\n");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("FILE: TOML parse error at line 1"),
        "{problems:?}"
    );
}

#[test]
fn the_affinity_is_isolated_unless_chosen() {
    assert_eq!(Config::defaults().stateless.affinity, Affinity::Isolated);
    let shared = load_file("[stateless]\naffinity = \"shared\"\n", Overrides::default()).unwrap();
    assert_eq!(shared.stateless.affinity, Affinity::Shared);
}

#[test]
fn each_affinity_reads_its_own_keys() {
    let pinned = load_file(
        "[stateless]\naffinity = \"pinned\"\npin_header = \"X-Conversation-Id\"\nfallback = \"shared\"\nmax_pinned = 7\npin_idle_ttl = \"90s\"\n",
        Overrides::default(),
    )
    .unwrap();
    let Affinity::Pinned {
        header,
        fallback,
        limits,
    } = pinned.stateless.affinity
    else {
        panic!("pinned")
    };
    assert_eq!(header.unwrap().as_str(), "x-conversation-id");
    assert_eq!(fallback, Fallback::Shared);
    assert_eq!(
        (limits.max_pinned, limits.idle_ttl),
        (7, Duration::from_secs(90))
    );

    let handles = load_file(
        "[stateless]\naffinity = \"handles\"\nhandle_open_tool = \"begin\"\nhandle_close_tool = \"end\"\nhandle_argument = \"ctx\"\nmax_handles_per_caller = 3\n",
        Overrides::default(),
    )
    .unwrap();
    let Affinity::Handles {
        tools,
        fallback,
        max_per_caller,
    } = handles.stateless.affinity
    else {
        panic!("handles")
    };
    assert_eq!(
        (
            tools.open.as_str(),
            tools.close.as_str(),
            tools.argument.as_str()
        ),
        ("begin", "end", "ctx")
    );
    assert_eq!((fallback, max_per_caller), (Fallback::Isolated, 3));

    let env = load_from(
        &Overrides::default(),
        Env::prefixed("MCP_PROXY_UNIT_TEST_NOTHING_"),
    )
    .unwrap();
    assert_eq!(env.stateless.affinity, Affinity::Isolated);
}

#[test]
fn bad_affinity_keys_name_themselves() {
    let err = load_file(
        "[stateless]\naffinity = \"sticky\"\nfallback = \"pinned\"\n",
        Overrides::default(),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("stateless.affinity (in ") && text.contains("\"sticky\" must be"),
        "{text}"
    );
    assert!(
        text.contains("stateless.fallback (in ") && text.contains("\"pinned\" must be"),
        "{text}"
    );

    let err = load_file(
        "[stateless]\naffinity = \"pinned\"\npin_header = \"Mcp-Session-Id\"\nmax_pinned = 0\n",
        Overrides::default(),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("stateless.pin_header"), "{text}");
    assert!(text.contains("stateless.max_pinned"), "{text}");
    let err = load_file(
        "[stateless]\naffinity = \"pinned\"\npin_header = \"not a header\"\n",
        Overrides::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("not an HTTP header name"), "{err}");

    let err = load_file(
        "[stateless]\naffinity = \"handles\"\nhandle_open_tool = \"open session\"\nhandle_close_tool = \"x\"\nhandle_argument = \"\"\nmax_handles_per_caller = 0\n",
        Overrides::default(),
    )
    .unwrap_err();
    let text = err.to_string();
    for key in [
        "stateless.handle_open_tool",
        "stateless.handle_argument",
        "stateless.max_handles_per_caller",
    ] {
        assert!(text.contains(key), "{key} missing from: {text}");
    }
    let err = load_file(
        "[stateless]\naffinity = \"handles\"\nhandle_open_tool = \"s\"\nhandle_close_tool = \"s\"\n",
        Overrides::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("must differ"), "{err}");
}

#[test]
fn fleet_keys_report_their_problems_like_every_other_key() {
    let problems = problems_of(
        "[session]\nstore = \"disk\"\nsealed_keys = \"abc\"\n\
         [cluster]\nadvertise = \"10.0.0.5\"\n\
         [upstream]\nurls = \"http://127.0.0.1:1/mcp\"\non_session_lost = \"retry\"\nhealth_interval = \"often\"\n\
         [upstreams.a]\nurls = \"http://127.0.0.1:2/mcp\"\nhealth_interval = 5\nmax_children = \"many\"\n",
    );
    assert_eq!(
        problems,
        [
            "cluster.advertise (in FILE): \"10.0.0.5\" must be the http:// base URL other proxy replicas reach this one at, e.g. \"http://10.0.0.5:8080\"",
            "session.sealed_keys (in FILE): \"abc\" is not a list; write it in brackets: [\"abc\"]",
            "session.store (in FILE): \"disk\" must be \"memory\", \"redis\" or \"sealed\"",
            "upstream.health_interval (in FILE): \"often\" is not a duration; write a number and a unit, e.g. \"30s\", \"5m\" or \"1h\"",
            "upstream.on_session_lost (in FILE): \"retry\" must be \"fail\" or \"reinitialize\"",
            "upstream.urls (in FILE): \"http://127.0.0.1:1/mcp\" is not a list; write it in brackets: [\"http://127.0.0.1:1/mcp\"]",
            "upstreams.a (in FILE): needs url, urls or command",
            "upstreams.a.health_interval (in FILE): 5 is not a duration; write it in quotes, e.g. \"30s\", \"10m\" or \"1h\"",
            "upstreams.a.max_children (in FILE): \"many\" is not a whole number of 0 or more; write e.g. 1000",
            "upstreams.a.urls (in FILE): \"http://127.0.0.1:2/mcp\" is not a list; write it in brackets: [\"http://127.0.0.1:2/mcp\"]",
        ]
    );
}

#[test]
fn an_upstream_overrides_the_stateless_settings_it_names() {
    let config = load_file(
        "[stateless]\naffinity = \"shared\"\nmax_pooled = 9\n\
         [upstreams.alpha]\ndefault = true\nurl = \"http://127.0.0.1:1/mcp\"\n\
         [upstreams.alpha.stateless]\naffinity = \"handles\"\nmax_handles_per_caller = 2\nhandle_open_tool = \"begin\"\n\
         [upstreams.beta]\nurl = \"http://127.0.0.1:2/mcp\"\n",
        Overrides::default(),
    )
    .unwrap();
    let set = config.upstream_set();
    let alpha = set.iter().find(|u| u.name == "alpha").unwrap();
    let Affinity::Handles {
        tools,
        fallback,
        max_per_caller,
    } = &alpha.stateless.affinity
    else {
        panic!("alpha is in handles mode: {:?}", alpha.stateless.affinity)
    };
    assert_eq!(
        (tools.open.as_str(), tools.close.as_str(), *max_per_caller),
        ("begin", "session_close", 2)
    );
    assert_eq!(*fallback, Fallback::Isolated);
    assert_eq!(alpha.stateless.max_pooled, 9, "inherited from [stateless]");
    let beta = set.iter().find(|u| u.name == "beta").unwrap();
    assert_eq!(beta.stateless, config.stateless);
    assert_eq!(beta.stateless.affinity, Affinity::Shared);
}

#[test]
fn a_bad_stateless_override_is_named_where_it_was_written() {
    let problems = problems_of(
        "[stateless]\npin_idle_ttl = \"later\"\n\
         [upstreams.alpha]\nurl = \"http://127.0.0.1:1/mcp\"\n\
         [upstreams.alpha.stateless]\naffinity = \"pinned\"\nmax_pinned = 0\nafinity = \"x\"\n",
    );
    assert_eq!(
        problems,
        [
            // Inherited, wrong at its source: said once, there.
            "stateless.pin_idle_ttl (in FILE): \"later\" is not a duration; write a number and a unit, e.g. \"30s\", \"5m\" or \"1h\"",
            "upstreams.alpha.stateless.afinity (in FILE): unknown key; did you mean affinity? The keys of [upstreams.alpha.stateless] are affinity, fallback, pin_header, max_pinned, pin_idle_ttl, handle_open_tool, handle_close_tool, handle_argument, max_handles_per_caller, max_pooled, max_listens, pool_idle_ttl, request_state_ttl, max_waiting_per_caller, tasks, task_tools, task_after and task_ttl.",
            "upstreams.alpha.stateless.max_pinned (in FILE): 0 is too small; the minimum is 1",
        ]
    );
}

#[test]
fn an_upstream_may_override_every_stateless_key() {
    let keys = |value: figment::value::Value| -> Vec<String> {
        match value {
            figment::value::Value::Dict(_, dict) => dict.keys().cloned().collect(),
            other => panic!("{other:?}"),
        }
    };
    let global = figment::value::Value::serialize(raw::RawStateless::default()).unwrap();
    let (merged, set) = raw::RawStatelessOverrides::default().over(&raw::RawStateless::default());
    assert!(set.is_empty());
    assert_eq!(
        format!("{merged:?}"),
        format!("{:?}", raw::RawStateless::default())
    );
    let every: raw::RawStatelessOverrides = figment::Figment::from(
        figment::providers::Serialized::defaults(raw::RawStateless::default()),
    )
    .extract()
    .unwrap();
    let (_, set) = every.over(&raw::RawStateless::default());
    let mut set: Vec<String> = set.into_iter().map(str::to_owned).collect();
    let mut all = keys(global);
    set.sort();
    all.sort();
    assert_eq!(set, all);
}

#[test]
fn limits_are_read_and_checked() {
    let config = load_file(
        "[limits]\nmax_connections = 10\nmax_connections_per_address = 0\nheader_read_timeout = \"2s\"\nidle_timeout = \"5s\"\nrequest_body_timeout = \"3s\"\nupstream_idle_timeout = \"1s\"\nupstream_idle_connections = 0\n",
        Overrides::default(),
    )
    .unwrap();
    let l = &config.limits;
    assert_eq!(l.max_connections, 10);
    assert_eq!(l.max_connections_per_address, None, "0: no cap per address");
    assert_eq!(l.header_read_timeout, Duration::from_secs(2));
    assert_eq!(l.idle_timeout, Duration::from_secs(5));
    assert_eq!(l.request_body_timeout, Duration::from_secs(3));
    assert_eq!(l.upstream_idle_timeout, Duration::from_secs(1));
    assert_eq!(l.upstream_idle_connections, 0);
    let defaults = Config::defaults().limits;
    assert_eq!(defaults.max_connections_per_address, Some(512));
    let err = load_file(
        "[limits]\nmax_connections = 0\nheader_read_timeout = \"1ms\"\nidle_timeout = \"never\"\n",
        Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    for key in [
        "limits.max_connections",
        "limits.header_read_timeout",
        "limits.idle_timeout",
    ] {
        assert!(err.contains(key), "{key} not named in: {err}");
    }
}

#[test]
fn the_per_caller_limits_default_below_the_cap_on_every_session() {
    let defaults = Config::defaults().session;
    assert_eq!(defaults.max_sessions, 10_000);
    assert_eq!(
        defaults.max_sessions_per_caller, 1000,
        "a tenth of max_sessions"
    );
    assert_eq!(defaults.creations_per_caller_per_minute, 300);
    // Unwritten, the cap follows max_sessions (at least one).
    let small = load_file("[session]\nmax_sessions = 5\n", Overrides::default()).unwrap();
    assert_eq!(small.session.max_sessions_per_caller, 1);
    let set = load_file(
        "[session]\nmax_sessions = 50\nmax_sessions_per_caller = 50\ncreations_per_caller_per_minute = 0\n",
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(set.session.max_sessions_per_caller, 50);
    assert_eq!(set.session.creations_per_caller_per_minute, 0, "0: off");
    let off = load_file(
        "[session]\nmax_sessions_per_caller = 0\n",
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(off.session.max_sessions_per_caller, 0, "0: off");
    // The sealed store has no cap on every session: any per-caller cap holds.
    let sealed = load_file(
        &format!(
            "[session]\nstore = \"sealed\"\nsealed_keys = [\"{}\"]\nmax_sessions = 10\nmax_sessions_per_caller = 100\n",
            "ab".repeat(32)
        ),
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(sealed.session.max_sessions_per_caller, 100);
}

#[test]
fn bad_per_caller_limits_name_their_keys() {
    let problems = problems_of(
        "[session]\nmax_sessions = 100\nmax_sessions_per_caller = 101\ncreations_per_caller_per_minute = 5000000000\n",
    );
    assert_eq!(
        problems,
        [
            "session.creations_per_caller_per_minute (in FILE): 5000000000 is too many; at most 4294967295 (0: no limit)",
            "session.max_sessions_per_caller (in FILE): 101 is more than session.max_sessions (100): one caller could take every session; write at most 100, or 0 for no cap",
        ]
    );
    let problems = problems_of("[session]\nmax_sessions_per_caller = \"lots\"\n");
    assert_eq!(
        problems,
        ["session.max_sessions_per_caller (in FILE): \"lots\" is not a whole number of 0 or more"]
    );
}

#[test]
fn auth_is_off_by_default_and_on_with_a_key() {
    assert!(Config::defaults().auth.is_none());
    let jwks = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jwt/jwks.json");
    let config = load_file(
        &format!(
            "[auth]\njwks_file = {jwks:?}\nissuer = \"https://auth.example.com/\"\naudience = \"https://mcp.example.com/mcp\"\nleeway = \"10s\"\n"
        ),
        Overrides::default(),
    )
    .unwrap();
    let auth = config.auth.unwrap();
    let crate::config::AuthKeys::Fixed { keys, skipped } = &auth.keys else {
        panic!("the file's keys: {:?}", auth.keys);
    };
    assert_eq!(keys.len(), 2);
    assert_eq!(skipped.len(), 2);
    assert_eq!(auth.rules.leeway, Duration::from_secs(10));
    assert_eq!(auth.rules.audience, ["https://mcp.example.com/mcp"]);
    assert!(
        !auth.forward_token,
        "the token stays at the proxy unless asked"
    );
    let secret = load_file(
        "[auth]\nhs256_secret = \"0123456789abcdef0123456789abcdef\"\nissuer = \"i\"\naudience = \"a\"\nforward_token = true\n",
        Overrides::default(),
    )
    .unwrap()
    .auth
    .unwrap();
    assert!(secret.forward_token);
    assert!(
        !format!("{secret:?}").contains("0123456789abcdef"),
        "the secret is not shown"
    );
}

#[test]
fn with_only_an_issuer_and_a_public_url_the_keys_are_the_issuers() {
    let config = load_file(
        "[auth]\nissuer = \"https://auth.example.com/\"\npublic_url = \"https://mcp.example.com/\"\n\
         required_scopes = [\"mcp\"]\nscopes_supported = [\"tools:admin\"]\n",
        Overrides::default(),
    )
    .unwrap();
    let auth = config.auth.unwrap();
    let crate::config::AuthKeys::Fetched { source, max_age } = &auth.keys else {
        panic!("fetched keys: {:?}", auth.keys);
    };
    assert!(
        matches!(source, crate::auth::keys::Source::Discover { issuer } if issuer == "https://auth.example.com/")
    );
    assert_eq!(*max_age, Duration::from_secs(900));
    assert!(
        auth.rules.audience.is_empty(),
        "each endpoint is its own audience"
    );
    assert_eq!(
        auth.resource.public_url.as_deref(),
        Some("https://mcp.example.com")
    );
    assert_eq!(
        auth.resource.authorization_servers,
        ["https://auth.example.com/"]
    );
    assert_eq!(auth.resource.scopes_supported, ["tools:admin", "mcp"]);
    let explicit = load_file(
        "[auth]\nissuer = \"https://auth.example.com/\"\naudience = \"a\"\njwks_uri = \"https://auth.example.com/keys\"\njwks_max_age = \"1h\"\n",
        Overrides::default(),
    )
    .unwrap()
    .auth
    .unwrap();
    assert!(matches!(
        &explicit.keys,
        crate::config::AuthKeys::Fetched { source: crate::auth::keys::Source::Jwks(url), max_age }
            if url == "https://auth.example.com/keys" && *max_age == Duration::from_secs(3600)
    ));
    // Keys may be fetched again as often as every 10 s, not more often.
    let every = |age: &str| {
        format!(
            "[auth]\nissuer = \"https://auth.example.com/\"\naudience = \"a\"\n\
             jwks_uri = \"https://auth.example.com/keys\"\njwks_max_age = \"{age}\"\n"
        )
    };
    let minute = load_file(&every("1m"), Overrides::default()).unwrap();
    assert!(matches!(
        &minute.auth.unwrap().keys,
        crate::config::AuthKeys::Fetched { max_age, .. } if *max_age == Duration::from_secs(60)
    ));
    let problems = problems_of(&every("5s"));
    assert!(
        problems
            .iter()
            .any(|p| p.contains("auth.jwks_max_age") && p.contains("minimum is 10s")),
        "{problems:?}"
    );
}

#[test]
fn upstream_credentials_are_an_http_upstreams_own_and_each_problem_is_named() {
    let dir = std::env::temp_dir().join(format!("mcp-cred-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "t").unwrap();
    let config = load_file(
        &format!(
            "[upstreams.a]\ndefault = true\nurl = \"http://127.0.0.1:9/mcp\"\n\
             credentials = [{{ header = \"Authorization\", prefix = \"Bearer \", file = {token:?} }}]\n\
             [upstreams.b]\nurl = \"http://127.0.0.1:10/mcp\"\n"
        ),
        Overrides::default(),
    )
    .unwrap();
    let set = config.upstream_set();
    let a = set.iter().find(|u| u.name == "a").unwrap();
    let b = set.iter().find(|u| u.name == "b").unwrap();
    assert_eq!(a.config.credentials.len(), 1);
    assert_eq!(a.config.credentials[0].header, http::header::AUTHORIZATION);
    assert!(b.config.credentials.is_empty(), "never another upstream's");
    let problems = problems_of(
        "[upstream]\ncommand = \"server\"\ncredentials = [{ header = \"X-Api-Key\", env = \"HOME\" }]\n\
         [upstreams.x]\nurl = \"http://127.0.0.1:9/mcp\"\ncredentials = [\
         { header = \"Host\", env = \"HOME\" }, { header = \"X-Key\" }, \
         { header = \"X-Other\", env = \"MCP_PROXY_TEST_SURELY_UNSET\" }]\n",
    );
    for (key, says) in [
        (
            "upstream.credentials",
            "give a stdio child its secrets in env",
        ),
        (
            "upstreams.x.credentials[0].header",
            "set by the proxy itself",
        ),
        ("upstreams.x.credentials[1]", "set file"),
        ("upstreams.x.credentials[2].env", "is not set"),
    ] {
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(key) && p.contains(says)),
            "{key}: {problems:?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rules_name_upstreams_served_and_patterns_that_can_match() {
    let config = load_file(
        "[upstreams.github]\nurl = \"http://127.0.0.1:9/mcp\"\n\
         [auth]\nissuer = \"https://auth.example.com/\"\naudience = \"a\"\n\
         [[auth.rules]]\nupstream = \"github\"\ntools = [\"get_*\"]\nscopes = [\"read\"]\n\
         [[auth.rules]]\nclaims = { groups = \"ops\" }\n",
        Overrides::default(),
    )
    .unwrap();
    let policy = &config.auth.unwrap().policy;
    assert!(policy.is_active());
    assert_eq!(policy.claim_names(), ["groups"]);
    let problems = problems_of(
        "[upstreams.github]\nurl = \"http://127.0.0.1:9/mcp\"\n\
         [auth]\nissuer = \"https://auth.example.com/\"\naudience = \"a\"\n\
         [[auth.rules]]\nupstream = \"gihtub\"\ntools = [\"a*b\"]\n",
    );
    for (key, says) in [
        ("auth.rules[0].upstream", "no upstream served here"),
        ("auth.rules[0].tools", "prefix ending in *"),
    ] {
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(key) && p.contains(says)),
            "{key}: {problems:?}"
        );
    }
}

#[test]
fn auth_problems_are_each_named_by_key() {
    let problems = problems_of(
        "[auth]\nhs256_secret = \"short\"\nleeway = \"1h\"\nresource_metadata = \"not a url\"\n",
    );
    for key in [
        "auth.hs256_secret",
        "auth.issuer",
        "auth.audience",
        "auth.leeway",
        "auth.resource_metadata",
    ] {
        assert!(
            problems.iter().any(|p| p.starts_with(key)),
            "{key} missing from {problems:?}"
        );
    }
    let both = problems_of(
        "[auth]\nhs256_secret = \"0123456789abcdef0123456789abcdef\"\njwks_file = \"x\"\nissuer = \"i\"\naudience = \"a\"\n",
    );
    assert!(both.iter().any(|p| p.contains("set one of")), "{both:?}");
    let missing = problems_of(
        "[auth]\njwks_file = \"/nonexistent/jwks.json\"\nissuer = \"i\"\naudience = \"a\"\n",
    );
    assert!(
        missing
            .iter()
            .any(|p| p.starts_with("auth.jwks_file") && p.contains("cannot be read")),
        "{missing:?}"
    );
    let off = problems_of("[auth]\naudience = \"a\"\nforward_token = true\n");
    assert!(
        off.iter()
            .any(|p| p.starts_with("auth.audience") && p.contains("no effect")),
        "{off:?}"
    );
    assert!(
        off.iter().any(|p| p.starts_with("auth.forward_token")),
        "{off:?}"
    );
    let public_url = problems_of(
        "[auth]\nissuer = \"https://auth.example.com\"\npublic_url = \"https://mcp.example.com/mcp\"\n",
    );
    assert!(
        public_url
            .iter()
            .any(|p| p.starts_with("auth.public_url") && p.contains("scheme, host and port only")),
        "{public_url:?}"
    );
    let typo = problems_of("[auth]\naudiance = \"a\"\n");
    assert!(
        typo.iter().any(|p| p.contains("did you mean audience")),
        "{typo:?}"
    );
}

#[test]
fn a_token_exchange_needs_an_issuer_an_http_upstream_a_target_and_a_secret() {
    let secret = file("proxy-secret\n");
    let config = load_file(
        &format!(
            "[auth]\nissuer = \"https://auth.example.com\"\naudience = \"https://mcp.example.com/mcp\"\n\
             [upstreams.tools]\nurl = \"http://127.0.0.1:9/mcp\"\n\
             token_exchange = {{ resource = \"https://tools.internal/mcp\", scope = \"tools:admin\", client_id = \"proxy\", client_secret_file = {:?} }}\n",
            secret.0.display().to_string()
        ),
        Overrides::default(),
    )
    .unwrap();
    let exchange = config.upstreams[0].token_exchange.clone().unwrap();
    assert_eq!(exchange.issuer, "https://auth.example.com");
    assert_eq!(
        exchange.token_endpoint, None,
        "the issuer's, from its metadata"
    );
    assert_eq!(
        exchange.resource.as_deref(),
        Some("https://tools.internal/mcp")
    );
    let set = config.upstream_set();
    assert!(set.iter().any(|u| u.config.token_exchange.is_some()));
    let problems = problems_of(
        "[upstreams.tools]\ncommand = \"tool-server\"\n\
         token_exchange = { client_id = \"a:b\" }\n\
         [upstreams.web]\nurl = \"http://127.0.0.1:9/mcp\"\n\
         credentials = [{ header = \"Authorization\", env = \"HOME\" }]\n\
         token_exchange = { resource = \"not a uri\", client_id = \"proxy\", client_secret_env = \"HOME\" }\n",
    );
    for (key, words) in [
        ("upstreams.tools.token_exchange", "HTTP upstream"),
        ("upstreams.web.token_exchange", "set auth.issuer"),
        ("upstreams.web.token_exchange.resource", "absolute URI"),
        ("upstreams.web.token_exchange", "keep one"),
    ] {
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(key) && p.contains(words)),
            "{key}: {words} missing from {problems:?}"
        );
    }
}

#[test]
fn a_tool_limit_has_a_rate_a_timeout_or_both() {
    let head = "[auth]\nhs256_secret = \"0123456789abcdef0123456789abcdef\"\nissuer = \"i\"\naudience = \"a\"\n";
    let config = load_file(
        &format!("{head}[[auth.limits]]\ntools = [\"slow_*\"]\ntimeout = \"30s\"\n[[auth.limits]]\ntools = [\"search\"]\nrate = 5\nper = \"1m\"\ntimeout = \"2s\"\n"),
        Overrides::default(),
    )
    .unwrap();
    let limits = &config.auth.unwrap().limits;
    assert_eq!(
        (limits[0].rate, limits[0].timeout),
        (0, Some(Duration::from_secs(30)))
    );
    assert_eq!(
        (limits[1].rate, limits[1].timeout),
        (5, Some(Duration::from_secs(2)))
    );
    let neither = problems_of(&format!("{head}[[auth.limits]]\ntools = [\"x\"]\n"));
    assert!(
        neither
            .iter()
            .any(|p| p.starts_with("auth.limits[0].rate") && p.contains("or set a timeout")),
        "{neither:?}"
    );
    let short = problems_of(&format!(
        "{head}[[auth.limits]]\ntools = [\"x\"]\ntimeout = \"1ms\"\n"
    ));
    assert!(
        short
            .iter()
            .any(|p| p.starts_with("auth.limits[0].timeout") && p.contains("too short")),
        "{short:?}"
    );
}

#[test]
fn the_upgrade_socket_is_off_by_default_and_must_fit_a_unix_socket_path() {
    assert!(Config::defaults().upgrade.socket.is_none());
    let config = load_file(
        "[upgrade]\nsocket = \"/run/mcp-session-proxy/upgrade.sock\"\n",
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(
        config.upgrade.socket.unwrap(),
        std::path::PathBuf::from("/run/mcp-session-proxy/upgrade.sock")
    );
    let long = format!("/run/{}", "x".repeat(91));
    let err = load_file(
        &format!("[upgrade]\nsocket = \"{long}\"\n"),
        Overrides::default(),
    )
    .unwrap_err();
    assert_eq!(err.problems.len(), 1, "{err}");
    assert!(
        err.problems[0].starts_with("upgrade.socket")
            && err.problems[0].contains("at most 95 bytes"),
        "{err}"
    );
}

#[test]
fn overload_thresholds_are_automatic_at_0_and_refused_when_too_small() {
    let defaults = Config::defaults();
    assert_eq!(defaults.limits.max_memory, None);
    assert_eq!(defaults.limits.max_open_files, None);
    let config = load_file(
        "[limits]\nmax_memory = 536870912\nmax_open_files = 1000\n",
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(config.limits.max_memory, Some(536_870_912));
    assert_eq!(config.limits.max_open_files, Some(1000));
    let err = load_file(
        "[limits]\nmax_memory = 1000\nmax_open_files = 10\n",
        Overrides::default(),
    )
    .unwrap_err();
    let keys = problem_keys(&err);
    assert_eq!(
        keys,
        ["limits.max_memory", "limits.max_open_files"],
        "{err}"
    );
}
