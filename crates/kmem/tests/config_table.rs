//! README.md's configuration table is the one `kmem::config` renders from its table of
//! variables (the same table the parser and the warnings use).

#[test]
fn readme_configuration_table_is_rendered_from_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
    let readme = std::fs::read_to_string(path).expect("README.md");
    let section = readme
        .split("\n## Configuration (environment)\n")
        .nth(1)
        .expect("the README has a configuration section");
    // The table: the first run of lines that start with `|` in the section.
    let table: String = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| format!("{l}\n"))
        .collect();
    let rendered = kmem::config::markdown_table();
    assert!(
        table == rendered,
        "README.md's configuration table differs from kmem::config::markdown_table(); \
         replace it with:\n\n{rendered}"
    );
}

/// Run by `a_misspelt_variable_is_named_once` in a child process: initialises the heap.
#[test]
fn child_initialises_the_heap() {
    if std::env::var_os("CONFIG_TABLE_CHILD").is_some() {
        let p = kmem::heap().kmalloc(64, kmem::Gfp::KERNEL).expect("memory");
        // SAFETY: allocated just above.
        unsafe { kmem::heap().kfree(p.as_ptr()) };
    }
}

#[test]
fn a_misspelt_variable_is_named_once() {
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "child_initialises_the_heap", "--test-threads=1"])
        .env("CONFIG_TABLE_CHILD", "1")
        .env("KMEM_PERCUP", "cpu")
        .env("KMEM_STRESS_SECS", "0")
        .output()
        .expect("child runs");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("kmem: ")).collect();
    assert_eq!(
        warnings,
        ["kmem: ignoring unknown KMEM_PERCUP; did you mean KMEM_PERCPU?"],
        "{err}"
    );
}
