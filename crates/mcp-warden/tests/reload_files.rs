//! What a reload reads: never an empty file, and never one caught half-written.
//! An empty (or upstream-less) file is refused as `check` refuses it, and a file
//! is read only once it stayed unchanged for half a second, so a writer that
//! takes its time is not taken at a half-way point where a rule is missing.

mod common;

use common::{cli, free_port, metrics_text, reloads, wait_for_reloads, Warden};
use serde_json::json;
use std::io::Write;
use std::time::Duration;

fn admin(port: u16) -> String {
    format!("[admin]\nlisten = \"127.0.0.1:{port}\"\n")
}

#[test]
fn an_empty_file_is_refused_by_check_and_by_a_reload_and_the_upstream_runs_on() {
    let port = free_port();
    let toml = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{}",
        admin(port)
    );
    let mut w = Warden::start_capturing_stderr("reload-empty", &toml, "info");
    let path = w.dir.join("warden.toml");
    std::fs::write(&path, "").unwrap();
    let said = format!(
        "{}: upstream: none is configured (is the file empty or cut short?): the gateway would offer no tools. \
         Add one: [[upstream]] with name = \"…\" and command = [\"…\"] or url = \"…\"",
        path.display()
    );
    let (code, _, err) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(
        (code, err.trim_end()),
        (1, format!("error: {said}").as_str())
    );
    w.hangup();
    let metrics = wait_for_reloads(port, "invalid", 1);
    assert_eq!(reloads(&metrics, "ok"), 0, "{metrics}");
    assert_eq!(
        w.call_text("fx.echo", json!({"text": "still here"})),
        r#"{"text":"still here"}"#
    );
    let log = w.stderr_after_exit();
    assert!(
        log.contains(&format!(
            "config reload refused; the configuration in force stays: {said}"
        )),
        "{log}"
    );
}

#[test]
fn watch_never_takes_a_file_caught_half_written() {
    let port = free_port();
    let strict = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{}\n[access]\ndefault = \"deny\"\n\n\
         [[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\neffect = \"allow\"\n",
        admin(port)
    );
    let mut w = Warden::start_with_args("reload-drip", &strict, "info", &["--watch"]);
    assert_eq!(w.tool_names(), vec!["fx.echo".to_owned()]);
    let path = w.dir.join("warden.toml");
    // The same policy written again by a writer that takes 2.5 s over it, a few
    // bytes every 50 ms. Every prefix that ends a line is a valid file, and until
    // [access] arrives it lets every tool through; the watcher looks every second.
    let full = format!(
        "{}# written again\n",
        std::fs::read_to_string(&path).unwrap()
    );
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let bytes = full.as_bytes();
    for chunk in bytes.chunks(bytes.len().div_ceil(50)) {
        file.write_all(chunk).unwrap();
        file.flush().unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(file);
    wait_for_reloads(port, "ok", 1);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(reloads(&metrics_text(port), "invalid"), 0);
    // A half-way state in force would have shown this caller every tool.
    assert_eq!(w.tool_names(), vec!["fx.echo".to_owned()]);
    assert!(
        !w.backlog
            .iter()
            .any(|m| m["method"] == "notifications/tools/list_changed"),
        "a half-written file was put in force: {:?}",
        w.backlog
    );
}
