//! Placeholder until the development engine lands.
fn main() {
    eprintln!("the development engine is not built yet");
    std::process::exit(2);
}
