//! The README shows `examples/quickstart.rs`: the two must stay the same program.

#[test]
fn the_readme_shows_the_quickstart_example_as_it_is() {
    let readme = include_str!("../../README.md");
    let example = include_str!("../examples/quickstart.rs");
    let start = readme
        .find("```rust\n")
        .expect("the README has a Rust code block")
        + "```rust\n".len();
    let len = readme[start..]
        .find("```\n")
        .expect("the README's Rust code block ends");
    let shown = &readme[start..start + len];
    // The example file starts with its own doc comment, which the README leaves out.
    let body: String = example
        .lines()
        .skip_while(|l| l.starts_with("//!") || l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        shown, body,
        "README.md's first program differs from apps/examples/quickstart.rs: copy one onto the other"
    );
}
