#[global_allocator]
static GLOBAL: snmalloc_rs::SnMalloc = snmalloc_rs::SnMalloc;
fn main() {
    strata_rust_bench::main_with("snmalloc");
}
