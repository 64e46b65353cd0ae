use super::*;

fn all(text: &str) -> Vec<String> {
    match Config::parse_all(text, "w.toml") {
        Ok(_) => Vec::new(),
        Err(problems) => problems
            .iter()
            .map(|p| format!("{} @ {}", p.error, p.location().unwrap_or_default()))
            .collect(),
    }
}

#[test]
fn an_unknown_key_and_a_bad_value_are_both_reported() {
    let text = "[[upstream]]\nname = \"a\"\ncomand = [\"x\"]\n\n[[rule]]\ncallers = [\"*\"]\ntools = [\"a.*\"]\neffect = \"alow\"\n";
    assert_eq!(
        all(text),
        [
            "w.toml: upstream[0].comand: unknown key in [upstream]. Did you mean 'command'? Known keys: name, command, url, bearer_token_env, tls_ca_file, env, secret_env, prefix, unknown_arguments, validate, reasons, timeout_ms, rerun_abandoned, restart_after_timeouts, ping_interval_ms, protocol, pins, tools, labels, credential, credential_env, max_caller_processes, caller_process_idle_ms. @ w.toml:3:1",
            "w.toml: rule[0].effect: 'alow' is not an effect; use one of: allow, deny, ask (did you mean 'allow'?) @ w.toml:8:1",
        ]
    );
    // The first is what a start or a reload names.
    let first = Config::parse(text, "w.toml").unwrap_err();
    assert_eq!(first.key, "upstream[0].comand");
}

#[test]
fn later_elements_keep_their_numbers_and_checks_run_on_the_rest() {
    let text = "[gateway]\nsession_idle = \"0s\"\n\n[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\n\n[[rule]]\ncallers = [\"*\"]\ntools = [\"a.*\"]\neffect = \"nope\"\n\n[[rule]]\ncallers = [\"*\"]\ntools = [\"a.*\"]\neffect = \"allow\"\nwhen = [{ arg = \"x\" }]\n\n[store]\nurl = \"mysql://x\"\n";
    assert_eq!(
        all(text),
        [
            "w.toml: rule[0].effect: 'nope' is not an effect; use one of: allow, deny, ask @ w.toml:11:1",
            "w.toml: gateway.session_idle: must be at least 1s: every HTTP session would end as it began @ w.toml:2:1",
            "w.toml: rule[1].when[0]: the condition on 'x' has no test; add one of: equals, one_of, glob, regex, min/max, min_len/max_len, present @ w.toml:17:9",
            "w.toml: store.url: 'mysql://x' is not a store URL; use sqlite://FILE or postgres://USER@HOST/DB @ w.toml:20:1",
        ]
    );
}

#[test]
fn a_table_that_lost_a_key_is_not_checked_again() {
    // Without `comand`, the upstream has no program: saying so would only repeat the first problem.
    let text = "[[upstream]]\nname = \"a\"\ncomand = [\"x\"]\n[[upstream]]\nname = \"a\"\ncommand = [\"y\"]\n";
    let found = all(text);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("w.toml: upstream[0].comand: unknown key"));
    assert_eq!(
        found[1],
        "w.toml: upstream[1].name: 'a' names two upstreams; names must be unique @ w.toml:5:1"
    );
}

#[test]
fn syntax_comes_first_and_alone() {
    assert_eq!(
        all("[gateway]\nlisten = \n"),
        ["w.toml: not valid TOML: string values must be quoted, expected literal string @ w.toml:2:10"]
    );
}

#[test]
fn every_unknown_key_of_one_table_is_reported() {
    let found = all("[gateway]\nlisen = \"x\"\nfrnt = \"http\"\n[store]\nurl_ = 1\n");
    let keys: Vec<&str> = found
        .iter()
        .map(|f| f.split(": ").nth(1).unwrap_or(""))
        .collect();
    assert_eq!(keys, ["gateway.lisen", "gateway.frnt", "store.url_"]);
    assert!(found[1].contains("Did you mean 'front'?") && found[1].ends_with("@ w.toml:3:1"));
}

#[test]
fn a_wrong_type_is_worded_as_serde_words_it_and_placed() {
    let found =
        all("[[upstream]]\nname = \"a\"\ncommand = \"x\"\n[defaults]\nvalidate = \"yes\"\n");
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].ends_with("@ w.toml:3:1"), "{}", found[0]);
    assert!(found[1].ends_with("@ w.toml:5:1"), "{}", found[1]);
}
