//! "Frozen" made checkable (docs/decisions.md §2): the SHA1 of every expanded script
//! must equal the one recorded in `lua/scripts.sha1`. Editing a script (or an
//! include it pulls in) without updating the manifest fails here; updating the
//! manifest is a visible, reviewable protocol change.
//!
//! `ECHOMQ_UPDATE_MANIFEST=1 cargo test -p echomq-protocol --test suite frozen::`
//! (or `just freeze`) rewrites the manifest.

use std::path::PathBuf;

fn manifest_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../lua/scripts.sha1")
}

fn current() -> String {
    let mut lines: Vec<String> = echomq_protocol::scripts::compiled()
        .map(|(stem, source, sha1)| {
            // Recompute rather than trust the build script's table.
            let actual = sha1_smol::Sha1::from(source.as_bytes())
                .digest()
                .to_string();
            assert_eq!(actual, sha1, "{stem}: compiled SHA1 is stale");
            format!("{sha1}  {stem}.lua")
        })
        .collect();
    lines.sort_by(|a, b| a[42..].cmp(&b[42..]));
    lines.join("\n") + "\n"
}

#[test]
fn frozen_scripts_match_manifest() {
    let now = current();
    if std::env::var_os("ECHOMQ_UPDATE_MANIFEST").is_some() {
        std::fs::write(manifest_path(), &now).unwrap();
        return;
    }
    let recorded = std::fs::read_to_string(manifest_path()).unwrap_or_default();
    if recorded != now {
        let recorded_lines: Vec<&str> = recorded.lines().collect();
        let changed: Vec<&str> = now
            .lines()
            .filter(|l| !recorded_lines.contains(l))
            .collect();
        panic!(
            "lua/ no longer matches lua/scripts.sha1 — a frozen script changed.\n\
             Changed or new: {changed:#?}\n\
             If the change is an intended protocol decision, run `just freeze` and commit the manifest with it."
        );
    }
}

#[test]
fn every_script_file_is_named_name_dash_numkeys() {
    for (stem, source, _) in echomq_protocol::scripts::compiled() {
        let (_, n) = stem.rsplit_once('-').expect("file name has a -<N> suffix");
        let n: usize = n.parse().expect("KEYS count suffix is a number");
        // The highest KEYS[i] a script reads must not exceed the count in its name.
        let max_used = (1..=20)
            .rev()
            .find(|i| source.contains(&format!("KEYS[{i}]")))
            .unwrap_or(0);
        assert!(
            max_used <= n,
            "{stem} reads KEYS[{max_used}] but declares {n}"
        );
    }
}
