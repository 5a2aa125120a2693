//! trybuild UI tests: each file under tests/ui breaks one rule the types enforce, and
//! its `.stderr` pins the compiler's message.

#[test]
fn rules_enforced_at_compile_time() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
