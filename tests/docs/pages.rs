//! The pages the checks read: README.md and every Markdown file of the book.

use std::path::{Path, PathBuf};

/// The repository's root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A page: its path (relative to the repository's root) and its text.
pub struct Page {
    pub path: PathBuf,
    pub text: String,
}

/// README.md and every `.md` under `docs/src`, in a stable order.
pub fn all() -> Vec<Page> {
    let mut paths = vec![PathBuf::from("README.md")];
    let mut book = Vec::new();
    collect(&root().join("docs/src"), &mut book);
    book.sort();
    paths.extend(
        book.into_iter()
            .map(|p| p.strip_prefix(root()).unwrap().to_path_buf()),
    );
    paths
        .into_iter()
        .map(|path| Page {
            text: read(&path),
            path,
        })
        .collect()
}

/// One page's text, by its path relative to the repository's root.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(root().join(path))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn collect(dir: &Path, into: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, into);
        } else if path.extension().is_some_and(|e| e == "md") {
            into.push(path);
        }
    }
}
