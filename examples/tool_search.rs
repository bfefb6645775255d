//! Tool search demo (being written).
fn main() {}
