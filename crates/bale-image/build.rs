//! With the feature `libjpeg`, compiles the small C file that decodes a region
//! of a JPEG with the system libjpeg-turbo (`csrc/jpeg_region.c`) and links
//! the library. Debian/Ubuntu: `apt-get install libjpeg-dev`.

fn main() {
    println!("cargo:rerun-if-changed=csrc/jpeg_region.c");
    #[cfg(feature = "libjpeg")]
    {
        let mut build = cc::Build::new();
        build.file("csrc/jpeg_region.c").warnings(true).opt_level(2);
        match pkg_config::Config::new().probe("libjpeg") {
            Ok(lib) => {
                for p in lib.include_paths {
                    build.include(p);
                }
            }
            Err(_) => println!("cargo:rustc-link-lib=jpeg"),
        }
        build.compile("bale_jpeg_region");
    }
}
