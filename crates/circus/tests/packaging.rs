//! What an operator installs: the systemd unit (checked by systemd-analyze),
//! the shipped config file (the server starts with it), completions, the
//! manual and a version that names its commit.

mod common;

use std::process::Command;

fn circus(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_circus")).args(args).output().unwrap();
    assert!(out.status.success(), "circus {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn dist(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist").join(name)
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let unit = std::fs::read_to_string(dist("circus.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/circus serve --config /etc/circus/circus.toml"), "{unit}");
    // verify checks that ExecStart's program exists: point it at this build.
    let dir = tempfile::tempdir().unwrap();
    let here = unit.replace("/usr/local/bin/circus", env!("CARGO_BIN_EXE_circus"));
    std::fs::write(dir.path().join("circus.service"), here).unwrap();
    let out = Command::new("systemd-analyze")
        // The manual is installed apart (circus man > /usr/local/share/man/man1/circus.1).
        .args(["verify", "--man=no", "./circus.service"])
        .current_dir(dir.path())
        .output()
        .expect("systemd-analyze is missing: apt-get install systemd (.ci/run installs it)");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !said.contains("circus.service"), "systemd-analyze verify: {said}");
}

#[test]
fn the_server_starts_with_the_shipped_config_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.txt"), b"shipped").unwrap();
    let conf = dist("circus.toml");
    // The file's root and ports, overridden by flags: they win over it.
    let s = common::serve(&["--config", conf.to_str().unwrap(), dir.path().to_str().unwrap()]);
    let (mut r, status, _) = common::get_head(&s.addr, "/f.txt", &[]);
    let mut body = String::new();
    std::io::Read::read_to_string(&mut r, &mut body).unwrap();
    assert_eq!((status, body.as_str()), (200, "shipped"));
}

#[test]
fn completions_the_manual_and_the_version_with_its_commit() {
    for shell in ["bash", "zsh", "fish"] {
        let script = circus(&["completions", shell]);
        assert!(script.contains("serve") && script.contains("drain-timeout"), "{shell}: {script}");
    }
    let man = circus(&["man"]);
    assert!(man.contains(".TH circus 1") && man.contains(".TH circus-serve 1"), "{man}");
    assert!(man.contains("drain\\-timeout"), "the manual lacks serve's flags");
    let version = circus(&["--version"]);
    let commit = version.split(['(', ')']).nth(1).unwrap_or("");
    let hex = commit.trim_end_matches("-dirty");
    assert!(hex.len() == 12 && hex.bytes().all(|b| b.is_ascii_hexdigit()), "no commit in {version:?}");
}
