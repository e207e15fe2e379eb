//! The binary's allocator: mimalloc rather than glibc's malloc. Memory
//! freed on another thread than the one that allocated it (a connection
//! accepted on one worker, its requests answered on another) goes back
//! without taking a lock the two workers contend for.
//!
//! Tuned so that a server's memory follows its connections down as well as
//! up (`circus bench slow`, thousands of idle downloads, KiB per connection
//! beyond the cache: glibc 8.8, mimalloc's defaults 21-31):
//! - its arenas are committed on demand rather than whole at once
//!   (`MI_DEFAULT_ARENA_EAGER_COMMIT=0`, set for its C build in
//!   `.cargo/config.toml`): 9.5-12.8;
//! - memory it frees goes back to the system at once rather than a second
//!   later, and only if the allocator is called again by then (purge delay
//!   0; an idle server calls it seldom): 7.5-8.9, no change in requests per
//!   second measured by hand (wrk, h2load; 1 KiB to 16 MiB, keep-alive and
//!   new connections).
//!
//! `MIMALLOC_ARENA_EAGER_COMMIT` and `MIMALLOC_PURGE_DELAY` in the
//! environment still win.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (`mimalloc.h` of mimalloc 3, the
/// version libmimalloc-sys builds by default), which the sys crate does not
/// name.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets the purge delay to 0 unless the environment sets it.
pub fn give_back_freed_memory_at_once() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets a plain integer option; mimalloc reads it on its
        // next purge decision, from any thread.
        #[allow(unsafe_code)]
        unsafe {
            libmimalloc_sys::mi_option_set(PURGE_DELAY, 0)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_is_the_option_it_names() {
        // mimalloc 3's default purge delay is 1000 ms; its neighbours
        // default to 1 and 0. Nothing else in this process sets it.
        // SAFETY: reads a plain integer option.
        #[allow(unsafe_code)]
        let default = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(default, 1000, "option {PURGE_DELAY} is not the purge delay");
        }
        give_back_freed_memory_at_once();
        // SAFETY: as above.
        #[allow(unsafe_code)]
        let now = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        assert_eq!(now, 0);
    }
}
