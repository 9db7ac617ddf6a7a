//! The workspace's layout rules, checked on the sources: no source file above 900
//! lines, no `impl` of one type spread over more than one folder, and no import cycle
//! between the top-level modules of a crate (a module's references `crate::other` are
//! its edges; comment lines do not count).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 900;
const CRATES: [&str; 4] = ["kmem-core", "kmem", "kmem-malloc", "kmem-cli"];

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src` belongs to (`src/slab/alloc.rs` -> `slab`).
fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The modules `text` names as `crate::name` (also inside `use crate::{a, b::c}`).
fn crate_refs(text: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let code = code.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or("");
                for item in inner.split(',') {
                    let name = item.trim().split("::").next().unwrap_or("");
                    if !name.is_empty() {
                        refs.insert(name.to_string());
                    }
                }
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                refs.insert(name);
            }
        }
    }
    refs
}

/// A cycle in `edges`, if there is one (as the list of modules along it).
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(node) {
            Some(1) => {
                let start = stack.iter().position(|n| n == node).unwrap();
                let mut cycle = stack[start..].to_vec();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            Some(2) => return None,
            _ => {}
        }
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        if let Some(c) = visit(node, edges, &mut state, &mut Vec::new()) {
            return Some(c);
        }
    }
    None
}

/// The module graph of one crate's `src`: top-level module -> modules it references.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| top_module(src, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = top_module(src, file);
        if from == "lib" || from == "main" {
            continue;
        }
        let text = fs::read_to_string(file).unwrap();
        let entry = edges.entry(from.clone()).or_default();
        for to in crate_refs(&text) {
            if to != from && modules.contains(&to) && to != "lib" && to != "main" {
                entry.insert(to);
            }
        }
    }
    edges
}

#[test]
fn no_source_file_is_longer_than_900_lines() {
    let mut long = Vec::new();
    for krate in CRATES {
        let mut files = Vec::new();
        rust_files(&crates_dir().join(krate).join("src"), &mut files);
        for file in files {
            let n = fs::read_to_string(&file).unwrap().lines().count();
            if n > MAX_LINES {
                long.push(format!("{} ({n} lines)", file.display()));
            }
        }
    }
    assert!(long.is_empty(), "files above {MAX_LINES} lines: {long:?}");
}

/// The type an `impl` line is for (`impl<P: Platform> Accounting for Kmem<P> {` ->
/// `Kmem`), or `None` for other lines.
fn impl_target(line: &str) -> Option<String> {
    let rest = line
        .strip_prefix("unsafe ")
        .unwrap_or(line)
        .strip_prefix("impl")?;
    if !(rest.starts_with('<') || rest.starts_with(' ')) {
        return None;
    }
    // Skip the generic parameters, then take the part after ` for ` if any.
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in rest.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            _ if depth == 0 => {
                start = i;
                break;
            }
            _ => {}
        }
    }
    let head = rest[start..].split('{').next()?.trim();
    let ty = head.rsplit(" for ").next()?.trim();
    let name = ty.split('<').next()?.rsplit("::").next()?.trim();
    (!name.is_empty()).then(|| name.to_string())
}

#[test]
fn no_impl_spreads_over_more_than_one_folder() {
    for krate in CRATES {
        let src = crates_dir().join(krate).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let mut folders: BTreeMap<String, BTreeSet<PathBuf>> = BTreeMap::new();
        for file in &files {
            let folder = file
                .parent()
                .unwrap()
                .strip_prefix(&src)
                .unwrap()
                .to_path_buf();
            for line in fs::read_to_string(file).unwrap().lines() {
                if let Some(ty) = impl_target(line) {
                    folders.entry(ty).or_default().insert(folder.clone());
                }
            }
        }
        for (ty, f) in folders {
            assert!(f.len() == 1, "{krate}: impls of {ty} in {f:?}");
        }
    }
}

#[test]
fn impl_targets_are_read_right() {
    assert_eq!(
        impl_target("impl<P: Platform> Accounting for Kmem<P> {").as_deref(),
        Some("Kmem")
    );
    assert_eq!(
        impl_target("impl<'a, P: Platform> Slub<'a, P> {").as_deref(),
        Some("Slub")
    );
    assert_eq!(
        impl_target("unsafe impl Sync for KmemCache {}").as_deref(),
        Some("KmemCache")
    );
    assert_eq!(impl_target("implements(x)"), None);
    assert_eq!(impl_target("    impl Foo {"), None);
}

#[test]
fn no_import_cycle_between_modules() {
    for krate in CRATES {
        let src = crates_dir().join(krate).join("src");
        let edges = module_graph(&src);
        assert!(
            !edges.is_empty() || krate != "kmem-core",
            "no modules found in {krate}"
        );
        if let Some(cycle) = find_cycle(&edges) {
            panic!("{krate}: import cycle {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_cycle_check_finds_cycles() {
    // The checker itself: a two-module cycle through a grouped import is found, and a
    // reference in a comment is not an edge.
    let a = crate_refs("use crate::{b::X, c};\n// crate::d\nlet _ = crate::e::f();");
    assert_eq!(
        a.into_iter().collect::<Vec<_>>(),
        ["b", "c", "e"].map(String::from)
    );
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    edges.entry("a".into()).or_default().insert("b".into());
    edges.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&edges), None);
    edges.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&edges).unwrap(),
        ["a", "b", "c", "a"].map(String::from)
    );
}

#[test]
fn kmem_core_layers_go_bottom_up() {
    // The slab layer reaches accounting only through its own interface, and the page
    // allocator knows nothing above it (the crate docs' layer list).
    let edges = module_graph(&crates_dir().join("kmem-core").join("src"));
    let deps = |m: &str| edges.get(m).cloned().unwrap_or_default();
    for above in ["memcontrol", "kmem", "kmalloc"] {
        assert!(!deps("slab").contains(above), "slab imports {above}");
    }
    for above in ["slab", "kmalloc", "memcontrol", "kmem", "show_mem"] {
        assert!(!deps("page").contains(above), "page imports {above}");
    }
    assert!(
        !deps("memcontrol").contains("kmem"),
        "memcontrol imports kmem"
    );
    assert!(
        !deps("kmalloc").contains("memcontrol"),
        "kmalloc imports memcontrol"
    );
}
