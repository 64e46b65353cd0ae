//! scripts/with-postgres, which scripts/test runs itself through: the server
//! that answers where it looks is used as it is; when nothing answers, a
//! throwaway cluster is started for the command and gone when it ends.

mod common;

use common::free_port;
use std::path::Path;
use std::process::{Command, Output};

fn with_postgres(probe: &str, script: &str) -> Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    Command::new(root.join("scripts/with-postgres"))
        .args(["sh", "-c", script])
        .env_remove("WARDEN_TEST_PG_URL")
        .env("WARDEN_TEST_PG_PROBE", probe)
        .output()
        .expect("run scripts/with-postgres")
}

#[test]
fn a_server_that_answers_is_used_as_it_is() {
    // Anything listening counts as the server: nothing is started.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let out = with_postgres(&format!("127.0.0.1:{port}"), "echo \"$WARDEN_TEST_PG_URL\"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("== PostgreSQL: the server on 127.0.0.1:{port} (postgres://postgres@127.0.0.1:{port})\npostgres://postgres@127.0.0.1:{port}\n")
    );
}

#[test]
fn with_nothing_answering_a_throwaway_cluster_serves_the_command_and_is_gone_after() {
    let installed = std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|mut d| d.next().is_some());
    let root = String::from_utf8_lossy(&Command::new("id").arg("-u").output().unwrap().stdout)
        .trim()
        == "0";
    if !installed && !root {
        eprintln!("skipped: PostgreSQL's programs are missing and only root may install them");
        return;
    }
    let dead = free_port();
    let out = with_postgres(
        &format!("127.0.0.1:{dead}"),
        "echo \"$WARDEN_TEST_PG_URL\"; psql -d \"$WARDEN_TEST_PG_URL/postgres\" -XAtc 'select 41 + 1'; exit 7",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The command's own exit status comes back.
    assert_eq!(
        out.status.code(),
        Some(7),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!("== PostgreSQL: nothing answers on 127.0.0.1:{dead}; starting a throwaway cluster")
    );
    let (port, dir) = lines[1]
        .strip_prefix("== PostgreSQL: throwaway cluster on 127.0.0.1:")
        .and_then(|r| r.strip_suffix(" (stopped at the end)"))
        .and_then(|r| r.split_once(" in "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(lines[2], format!("postgres://postgres@127.0.0.1:{port}"));
    assert_eq!(lines[3], "42");
    // Stopped and removed: nothing listens there, the folder is gone.
    assert!(std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_err());
    assert!(!Path::new(dir).exists(), "{dir}");
}
