fn main() {
    strata_rust_bench::main_with("system");
}
