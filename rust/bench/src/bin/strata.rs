#[global_allocator]
static GLOBAL: strata::Strata = strata::Strata;
fn main() {
    strata_rust_bench::main_with("strata");
}
