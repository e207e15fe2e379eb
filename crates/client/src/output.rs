//! Where `circus get URL` saves when the user names no file: the URL's last
//! path segment, in the current directory, but never over an existing file
//! and never as a dotfile unless asked to (`--force`). A URL is the server's
//! choice of name, and a server must not be able to replace `~/.bashrc` or
//! a file the user already has just because someone fetched a link.

use crate::GetError;
use std::path::PathBuf;

/// The file name a URL suggests: its last path segment, percent-decoded.
/// `None` when there is none (`http://host/`) or it is not a plain name.
pub fn output_name(url: &str) -> Option<PathBuf> {
    let uri: http::Uri = url.parse().ok()?;
    let segment = uri.path().rsplit('/').next()?;
    let name = percent_decode(segment)?;
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0']);
    plain.then(|| PathBuf::from(name))
}

/// The output for a download given no `-o`: [`output_name`], refused (as a
/// usage error) when it names a dotfile or a file that already exists,
/// unless `force`. A part file left by an earlier run is no obstacle: the
/// download resumes it.
pub fn default_output(url: &str, force: bool) -> Result<PathBuf, GetError> {
    let name = output_name(url)
        .ok_or_else(|| GetError::Usage(format!("cannot name the file after {url}: give one with -o PATH")))?;
    if force {
        return Ok(name);
    }
    if name.to_string_lossy().starts_with('.') {
        return Err(GetError::Usage(format!(
            "{url} would be saved as the hidden file {}: give a name with -o PATH, or --force to use that one",
            name.display()
        )));
    }
    // Not `exists()`: a dangling symlink is in the way too.
    if name.symlink_metadata().is_ok() {
        return Err(GetError::Usage(format!(
            "{} already exists: give another name with -o PATH, or --force to replace it",
            name.display()
        )));
    }
    Ok(name)
}

fn percent_decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names_from_urls() {
        let name = |u| output_name(u).map(|p| p.display().to_string());
        assert_eq!(name("http://h/iso/big.iso").as_deref(), Some("big.iso"));
        assert_eq!(name("http://h/a%20b.bin?x=1").as_deref(), Some("a b.bin"));
        assert_eq!(name("http://h/"), None);
        assert_eq!(name("http://h"), None);
        assert_eq!(name("http://h/x/.."), None);
        assert_eq!(name("http://h/a%2Fb"), None);
        assert_eq!(name("http://h/bad%zz"), None);
    }

    #[test]
    fn default_output_refuses_dotfiles_unless_forced() {
        for url in ["http://h/.bashrc", "http://h/x/%2Eprofile", "http://h/.circus-part"] {
            let err = default_output(url, false).unwrap_err();
            assert!(matches!(&err, GetError::Usage(m) if m.contains("hidden") && m.contains("--force")), "{err}");
            assert_eq!(err.exit_code(), 1);
            assert!(default_output(url, true).is_ok(), "{url}");
        }
        assert!(matches!(default_output("http://h/", true), Err(GetError::Usage(_))));
    }
}
