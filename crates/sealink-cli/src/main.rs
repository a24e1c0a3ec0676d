#[allow(dead_code)]
mod keyfile;
fn main() {}
