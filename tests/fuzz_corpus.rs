//! The fuzz targets' invariants (`fuzz/src/lib.rs`) over the committed corpus
//! (`fuzz/corpus/<target>/`): every seed and every crash input kept as a regression is
//! checked by `cargo test`, on stable Rust, without libFuzzer. `fuzz/run.sh` runs the
//! targets themselves.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests fail loudly"
)]

#[path = "../fuzz/src/lib.rs"]
mod fuzz;

use std::path::PathBuf;

/// Runs `check` on every file of `fuzz/corpus/<target>/` (at least one).
fn corpus(target: &str, check: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus in {}", dir.display());
    for file in files {
        let data = std::fs::read(&file).unwrap();
        let checked = std::panic::catch_unwind(|| check(&data));
        assert!(
            checked.is_ok(),
            "{target}: {} fails its invariants",
            file.display()
        );
    }
}

#[test]
fn the_envelope_corpus_holds() {
    corpus("envelope", fuzz::envelope);
}

#[test]
fn the_rewrite_corpus_holds() {
    corpus("rewrite", fuzz::rewrite);
}

#[test]
fn the_sse_corpus_holds() {
    corpus("sse", fuzz::sse);
}

#[test]
fn the_sse_upstream_corpus_holds() {
    corpus("sse_upstream", fuzz::sse_upstream);
}

#[test]
fn the_id_restore_corpus_holds() {
    corpus("id_restore", fuzz::id_restore);
}
