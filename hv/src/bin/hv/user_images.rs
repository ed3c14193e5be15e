//! Guest images the config names by file (`image = { file = "PATH" }`),
//! embedded at build time: `cargo xtask build/run --config FILE` resolves
//! each path against the config's folder and hands the list to the build
//! (`HV_USER_IMAGES`, see `build.rs`). Found by the path as the config wrote it.

include!(concat!(env!("OUT_DIR"), "/user_images.rs"));

/// The embedded image the config calls `path`, if this build has it.
pub fn find(path: &str) -> Option<&'static [u8]> {
    USER_IMAGES
        .iter()
        .find(|(name, _)| *name == path)
        .map(|(_, bytes)| *bytes)
}
