//! The checked-in header `include/cxdirect.h` is what cbindgen makes of the crate now.

use std::path::PathBuf;

#[test]
fn header_is_current() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("capi/cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let path = crate_dir.join("include/cxdirect.h");
    if std::env::var_os("CXDIRECT_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/cxdirect.h");
        return;
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "capi/include/cxdirect.h differs from what cbindgen makes of the crate now; refresh \
         it with\n\n    CXDIRECT_BLESS=1 cargo test -p cxdirect-c --test header\n\nand \
         commit the result"
    );
}
