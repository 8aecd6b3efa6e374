//! `cargo xtask tidy`: structural checks that keep the workspace's layout telling the truth
//! about its architecture. Each check collects every violation rather than stopping at the
//! first, so one run shows everything to fix. The same checks run as the `tidy` test, which
//! makes `cargo test --workspace` (and so CI) fail on a violation.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::metadata::{self, Package};

/// The layer of every crate under `crates/`. A crate may depend only on crates of a strictly
/// lower layer, so the dependency graph stays a stack: storage at the bottom, the binary at
/// the top. The order mirrors `[workspace.dependencies]` in the root manifest.
const LAYERS: &[(&str, u8)] = &[
    ("memlayer-store", 0),
    ("memlayer-postgres", 1),
    ("memlayer-embed", 1),
    ("memlayer-index", 1),
    ("memlayer-llm", 1),
    ("memlayer-memory", 2),
    ("memlayer-erasure", 3),
    ("memlayer-agent", 4),
    ("memlayer-server", 5),
    ("memlayer", 6),
    // The benchmarks may use any product crate; the top layer keeps every crate off them,
    // and `check_bench_is_a_leaf` keeps xtask and the tests off them too.
    ("memlayer-bench", 7),
];

/// The crate that holds the in-process benchmarks: a leaf nothing may depend on.
const BENCH_CRATE: &str = "memlayer-bench";

/// Product crates' names start with this; xtask runs them as processes instead of linking
/// them, so that its own tasks (`tidy`, `dist`, ...) do not compile them.
const PRODUCT_PREFIX: &str = "memlayer";

/// Edges allowed between crates of the same layer, as (from, to). The indexes need the
/// embedder to turn queries into vectors, while the embedder must never see the indexes.
const SAME_LAYER_EDGES: &[(&str, &str)] = &[("memlayer-index", "memlayer-embed")];

/// One broken rule, reported against the file that has to change.
#[derive(Debug, PartialEq)]
pub(crate) struct Violation {
    file: PathBuf,
    reason: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.reason)
    }
}

/// Runs every check against the workspace at `root`.
pub(crate) fn check(root: &Path) -> anyhow::Result<Vec<Violation>> {
    let metadata = metadata::read(root)?;
    let crates: Vec<&Package> = metadata
        .packages
        .iter()
        .filter(|package| is_under_crates(root, package))
        .collect();

    let mut violations = Vec::new();
    violations.extend(check_module_docs(root, &crates)?);
    violations.extend(check_folder_names(root, &crates));
    violations.extend(check_layers(root, &metadata.packages));
    violations.extend(check_xtask_links_no_product(root, &metadata.packages));
    violations.extend(check_bench_is_a_leaf(root, &metadata.packages));
    violations.extend(check_workspace_lints(root, &crates)?);
    violations.extend(check_unsafe_allowed_once(root)?);
    Ok(violations)
}

/// The one file allowed to lift the workspace's `unsafe_code = "deny"`: glibc's
/// `malloc_trim`, which no safe crate wraps.
const UNSAFE_ALLOWED_IN: &str = "crates/memlayer-memory/src/loaders.rs";

/// No Rust file of the workspace but [`UNSAFE_ALLOWED_IN`] allows `unsafe` code.
fn check_unsafe_allowed_once(root: &Path) -> anyhow::Result<Vec<Violation>> {
    let mut files = Vec::new();
    for dir in ["crates", "xtask", "tests"] {
        rust_files(&root.join(dir), &mut files)?;
    }
    let mut violations = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("could not read {}", path.display()))?;
        if allows_unsafe(&text) && path != root.join(UNSAFE_ALLOWED_IN) {
            let reason = format!("allows unsafe code; only {UNSAFE_ALLOWED_IN} may");
            violations.push(violation(root, &path, reason));
        }
    }
    Ok(violations)
}

/// Whether `text` lifts the `unsafe_code` lint (spelt so that this file does not).
fn allows_unsafe(text: &str) -> bool {
    let lint = concat!("unsafe", "_code");
    ["allow(", "expect(", "warn("]
        .iter()
        .any(|level| text.contains(&format!("{level}{lint}")))
}

/// Every `.rs` file under `dir`, build output left out.
fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("could not read {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name != "target") {
                rust_files(&path, files)?;
            }
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// The packages that the layering applies to; the `tests` package and xtask sit outside
/// `crates/` and are not layered (the tests may depend on any product crate; xtask on none,
/// and neither on memlayer-bench: see the checks below).
fn is_under_crates(root: &Path, package: &Package) -> bool {
    package.manifest_path.parent().and_then(Path::parent) == Some(&root.join("crates"))
}

fn crate_dir(package: &Package) -> &Path {
    package
        .manifest_path
        .parent()
        .expect("a manifest path names a file inside the package folder")
}

fn violation(root: &Path, file: &Path, reason: String) -> Violation {
    let file = file.strip_prefix(root).unwrap_or(file).to_path_buf();
    Violation { file, reason }
}

/// Every crate root opens with a `//!` paragraph saying what the crate owns.
fn check_module_docs(root: &Path, crates: &[&Package]) -> anyhow::Result<Vec<Violation>> {
    let mut roots: Vec<PathBuf> = crates
        .iter()
        .flat_map(|package| {
            ["lib.rs", "main.rs"].map(|file| crate_dir(package).join("src").join(file))
        })
        .filter(|path| path.is_file())
        .collect();
    roots.push(root.join("xtask/src/main.rs"));

    let mut violations = Vec::new();
    for path in roots {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("could not read {}", path.display()))?;
        if !starts_with_module_doc(&text) {
            let reason = "does not begin with a `//!` paragraph saying what it owns".to_owned();
            violations.push(violation(root, &path, reason));
        }
    }
    Ok(violations)
}

fn starts_with_module_doc(text: &str) -> bool {
    text.lines()
        .find(|line| !line.trim().is_empty())
        .is_some_and(|line| line.trim_start().starts_with("//!"))
}

/// `crates/foo` holds package `foo`, so a path in an error message or a `-p` flag leads
/// straight to the folder.
fn check_folder_names(root: &Path, crates: &[&Package]) -> Vec<Violation> {
    crates
        .iter()
        .filter(|package| crate_dir(package).file_name() != Some(package.name.as_ref()))
        .map(|package| {
            let reason = format!(
                "package `{}` must live in a folder of the same name",
                package.name
            );
            violation(root, &package.manifest_path, reason)
        })
        .collect()
}

fn layer_of(name: &str) -> Option<u8> {
    LAYERS
        .iter()
        .find(|(crate_name, _)| *crate_name == name)
        .map(|(_, layer)| *layer)
}

/// Internal dependency edges of every kind point down the layer table. Dev-dependencies
/// count too: a test that reaches up a layer couples the lower crate to the higher one just
/// the same.
fn check_layers(root: &Path, packages: &[Package]) -> Vec<Violation> {
    let is_internal = |name: &str| packages.iter().any(|package| package.name == name);
    let mut violations = Vec::new();
    for package in packages
        .iter()
        .filter(|package| is_under_crates(root, package))
    {
        let Some(layer) = layer_of(&package.name) else {
            let reason = format!(
                "crate `{}` has no layer: add it to the layer table in xtask/src/tidy.rs",
                package.name
            );
            violations.push(violation(root, &package.manifest_path, reason));
            continue;
        };
        for dependency in &package.dependencies {
            if !is_internal(&dependency.name) {
                continue;
            }
            let allowed = match layer_of(&dependency.name) {
                Some(dependency_layer) => {
                    dependency_layer < layer
                        || SAME_LAYER_EDGES
                            .contains(&(package.name.as_str(), dependency.name.as_str()))
                }
                // A layered crate must not lean on the test harness, xtask, or an unlayered
                // crate (which is reported on its own).
                None => false,
            };
            if !allowed {
                let dependency_layer = layer_of(&dependency.name)
                    .map_or_else(|| "no layer".to_owned(), |layer| format!("layer {layer}"));
                let reason = format!(
                    "`{}` (layer {layer}) has a {} dependency on `{}` ({dependency_layer}); \
                     crates may only depend on lower layers",
                    package.name,
                    dependency.kind_name(),
                    dependency.name,
                );
                violations.push(violation(root, &package.manifest_path, reason));
            }
        }
    }
    violations
}

/// xtask orchestrates: it builds and runs memlayer's crates (and memlayer-bench) as
/// processes, and depends on none of them in any kind.
fn check_xtask_links_no_product(root: &Path, packages: &[Package]) -> Vec<Violation> {
    packages
        .iter()
        .filter(|package| package.name == "xtask")
        .flat_map(|package| {
            package
                .dependencies
                .iter()
                .filter(|dependency| dependency.name.starts_with(PRODUCT_PREFIX))
                .map(move |dependency| {
                    let reason = format!(
                        "xtask has a {} dependency on `{}`; xtask must run memlayer's crates as \
                         processes (`cargo run -p ...`), not link them",
                        dependency.kind_name(),
                        dependency.name
                    );
                    violation(root, &package.manifest_path, reason)
                })
        })
        .collect()
}

/// No package of the workspace (not even the tests or xtask) depends on memlayer-bench: the
/// benchmarks stay out of everything that ships or runs in CI's build of the product.
fn check_bench_is_a_leaf(root: &Path, packages: &[Package]) -> Vec<Violation> {
    packages
        .iter()
        .flat_map(|package| {
            package
                .dependencies
                .iter()
                .filter(|dependency| dependency.name == BENCH_CRATE)
                .map(move |dependency| {
                    let reason = format!(
                        "`{}` has a {} dependency on `{BENCH_CRATE}`; no crate may depend on \
                         the benchmarks",
                        package.name,
                        dependency.kind_name()
                    );
                    violation(root, &package.manifest_path, reason)
                })
        })
        .collect()
}

/// Every crate takes the workspace's lint levels, so a lint is configured in one place.
fn check_workspace_lints(root: &Path, crates: &[&Package]) -> anyhow::Result<Vec<Violation>> {
    let mut violations = Vec::new();
    for package in crates {
        let path = &package.manifest_path;
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("could not read {}", path.display()))?;
        let manifest: toml::Table = text
            .parse()
            .with_context(|| format!("could not parse {}", path.display()))?;
        let inherits = manifest
            .get("lints")
            .and_then(|lints| lints.get("workspace"))
            .and_then(toml::Value::as_bool)
            == Some(true);
        if !inherits {
            let reason = "missing `[lints] workspace = true`".to_owned();
            violations.push(violation(root, path, reason));
        }
    }
    Ok(violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::Dependency;

    /// The real workspace passes every check.
    #[test]
    fn tidy() {
        let violations = check(&crate::workspace_root()).expect("tidy could run");
        let report: Vec<String> = violations.iter().map(ToString::to_string).collect();
        assert!(
            report.is_empty(),
            "tidy found problems:\n{}",
            report.join("\n")
        );
    }

    fn root() -> PathBuf {
        PathBuf::from("/ws")
    }

    /// A package at `/ws/{folder}/Cargo.toml` with the given (name, kind) dependencies.
    fn package(folder: &str, name: &str, dependencies: &[(&str, Option<&str>)]) -> Package {
        Package {
            name: name.to_owned(),
            manifest_path: root().join(folder).join("Cargo.toml"),
            dependencies: dependencies
                .iter()
                .map(|(name, kind)| Dependency {
                    name: (*name).to_owned(),
                    kind: kind.map(str::to_owned),
                })
                .collect(),
        }
    }

    fn layered(name: &str, dependencies: &[(&str, Option<&str>)]) -> Package {
        package(&format!("crates/{name}"), name, dependencies)
    }

    fn layer_reasons(packages: &[Package]) -> Vec<String> {
        check_layers(&root(), packages)
            .into_iter()
            .map(|violation| violation.to_string())
            .collect()
    }

    #[test]
    fn downward_edges_pass() {
        let packages = [
            layered("memlayer-store", &[("serde", None)]),
            layered("memlayer-embed", &[("memlayer-store", None)]),
            layered(
                "memlayer-index",
                &[("memlayer-store", None), ("memlayer-embed", Some("build"))],
            ),
            layered("memlayer-server", &[("memlayer-store", Some("dev"))]),
        ];
        assert_eq!(layer_reasons(&packages), Vec::<String>::new());
    }

    #[test]
    fn upward_edge_is_reported() {
        let packages = [
            layered("memlayer-store", &[("memlayer-server", Some("dev"))]),
            layered("memlayer-server", &[]),
        ];
        assert_eq!(
            layer_reasons(&packages),
            [
                "crates/memlayer-store/Cargo.toml: `memlayer-store` (layer 0) has a dev dependency \
                 on `memlayer-server` (layer 5); crates may only depend on lower layers"
            ]
        );
    }

    #[test]
    fn same_layer_edge_is_reported_unless_allowed() {
        let packages = [
            layered("memlayer-embed", &[("memlayer-index", None)]),
            layered("memlayer-index", &[("memlayer-embed", None)]),
        ];
        assert_eq!(
            layer_reasons(&packages),
            [
                "crates/memlayer-embed/Cargo.toml: `memlayer-embed` (layer 1) has a normal \
                 dependency on `memlayer-index` (layer 1); crates may only depend on lower layers"
            ]
        );
    }

    #[test]
    fn unlayered_crate_is_reported() {
        let packages = [layered("memlayer-cache", &[])];
        assert_eq!(
            layer_reasons(&packages),
            [
                "crates/memlayer-cache/Cargo.toml: crate `memlayer-cache` has no layer: add it to \
                 the layer table in xtask/src/tidy.rs"
            ]
        );
    }

    #[test]
    fn exempt_packages_may_depend_on_anything_but_not_be_depended_on() {
        let packages = [
            package(
                "tests",
                "memlayer-tests",
                &[("memlayer", None), ("memlayer-store", None)],
            ),
            package("xtask", "xtask", &[("memlayer-server", None)]),
            layered("memlayer", &[("memlayer-tests", Some("dev"))]),
            layered("memlayer-store", &[]),
            layered("memlayer-server", &[]),
        ];
        assert_eq!(
            layer_reasons(&packages),
            [
                "crates/memlayer/Cargo.toml: `memlayer` (layer 6) has a dev dependency on \
                 `memlayer-tests` (no layer); crates may only depend on lower layers"
            ]
        );
    }

    #[test]
    fn xtask_must_not_link_product_crates() {
        let packages = [
            package(
                "xtask",
                "xtask",
                &[
                    ("serde", None),
                    ("memlayer-store", None),
                    ("memlayer-bench", Some("dev")),
                ],
            ),
            layered("memlayer-store", &[]),
        ];
        let reasons: Vec<String> = check_xtask_links_no_product(&root(), &packages)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            reasons,
            [
                "xtask/Cargo.toml: xtask has a normal dependency on `memlayer-store`; xtask must \
                 run memlayer's crates as processes (`cargo run -p ...`), not link them",
                "xtask/Cargo.toml: xtask has a dev dependency on `memlayer-bench`; xtask must \
                 run memlayer's crates as processes (`cargo run -p ...`), not link them"
            ]
        );
    }

    #[test]
    fn nothing_may_depend_on_the_benchmarks() {
        let packages = [
            layered("memlayer-bench", &[("memlayer-store", None)]),
            layered("memlayer-store", &[]),
            package(
                "tests",
                "memlayer-tests",
                &[("memlayer-bench", Some("dev"))],
            ),
        ];
        let reasons: Vec<String> = check_bench_is_a_leaf(&root(), &packages)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            reasons,
            [
                "tests/Cargo.toml: `memlayer-tests` has a dev dependency on `memlayer-bench`; no \
                 crate may depend on the benchmarks"
            ]
        );
        assert_eq!(layer_reasons(&packages), Vec::<String>::new());
    }

    #[test]
    fn folder_must_match_package_name() {
        let packages = [
            package("crates/store", "memlayer-store", &[]),
            layered("memlayer-index", &[]),
        ];
        let crates: Vec<&Package> = packages.iter().collect();
        let reasons: Vec<String> = check_folder_names(&root(), &crates)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            reasons,
            [
                "crates/store/Cargo.toml: package `memlayer-store` must live in a folder of the same name"
            ]
        );
    }

    #[test]
    fn unsafe_code_is_allowed_only_by_an_attribute() {
        let lint = concat!("unsafe", "_code");
        assert!(allows_unsafe(&format!("#[allow({lint})]\nfn f() {{}}")));
        assert!(allows_unsafe(&format!(
            "#![expect({lint}, reason = \"ffi\")]"
        )));
        assert!(!allows_unsafe(&format!("#![deny({lint})]")));
        assert!(!allows_unsafe("fn f() {}"));
    }

    #[test]
    fn module_doc_must_come_first() {
        assert!(starts_with_module_doc("\n//! Owns things.\n\nmod a;\n"));
        assert!(!starts_with_module_doc("// Licence.\n//! Owns things.\n"));
        assert!(!starts_with_module_doc("fn main() {}\n"));
        assert!(!starts_with_module_doc(""));
    }
}
