//! Builds Lua 5.4 (the `lua-src` crate's sources) with patchable function
//! entries, as a static library `bench record`'s Lua rows link a small
//! interpreter against: a big real program for both tracers to record.

fn main() {
    // cc takes CFLAGS from the environment, after its own flags.
    std::env::set_var("CFLAGS", "-fpatchable-function-entry=5");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let lua = lua_src::Build::new()
        .out_dir(out.join("lua"))
        .build(lua_src::Lua54);
    println!(
        "cargo:rustc-env=SHADOWGRAPH_BENCH_LUA_LIB={}",
        lua.lib_dir().join("liblua5.4.a").display()
    );
    println!("cargo:rerun-if-changed=build.rs");
}
