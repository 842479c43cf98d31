//! The `lineage` command line.
fn main() {
    println!("lineage: see `lineage --help`");
}
