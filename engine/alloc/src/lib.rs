//! The allocator Sluice's programs run on: mimalloc, asked for an ordinary
//! block whenever an ordinary block is aligned enough.
//!
//! The `mimalloc` crate's allocator passes every request to
//! `mi_malloc_aligned`, whatever its alignment. mimalloc 3 serves that from
//! its fast path only for blocks of up to 1 KiB that happen to be aligned;
//! a larger block whose size is not a power of two (a boxed future, a body
//! buffer, a grown `Vec`) is over-allocated and offset instead, and its page
//! marked as holding offset blocks, which slows every later free on it.
//! On the webhook path that was 15.7 allocations of each request; serving
//! them as below cut 3.0% of its instructions (docs/benchmarks.md, twelfth
//! sitting).
//!
//! Every mimalloc block of 16 bytes or more starts on a 16-byte boundary
//! (and every smaller one on an 8-byte one), so a request aligned to at
//! most 16 and no larger than its size is served by `mi_malloc` as is:
//! the rule Rust's own `System` allocator uses over `malloc`.
#![no_std]
// A global allocator is an unsafe trait: this crate is only that.
#![allow(unsafe_code)]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment of every mimalloc block at least this large
/// (`MI_MAX_ALIGN_SIZE`).
const PLAIN_ALIGN: usize = 16;

/// Whether an ordinary block of `size` bytes is aligned to `align`.
#[inline]
fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

/// mimalloc as the global allocator (see the crate's documentation).
pub struct Mimalloc;

// SAFETY: each call is mimalloc's for the same request; the aligned calls
// serve what an ordinary block would not align, and `mi_free` and
// `mi_realloc` take blocks from either.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc takes any size; `plain` guards the alignment.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (GlobalAlloc's contract).
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`; the block
        // it moves to is aligned as `alloc`'s would be for `new_size`.
        unsafe {
            if plain(layout.align(), new_size) {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size and alignment comes back aligned, zeroed when asked,
    /// and keeps its bytes when it grows or shrinks.
    #[test]
    fn blocks_are_aligned_zeroed_and_kept() {
        let a = Mimalloc;
        for align in [1, 2, 4, 8, 16, 32, 64, 128, 4096] {
            for size in [1, 3, 7, 8, 15, 16, 24, 100, 1000, 1025, 1500, 3000, 70_000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                for new_size in [size / 2 + 1, size * 3] {
                    // SAFETY: non-zero sizes; each block is freed once, by
                    // this allocator, with the layout it has then.
                    unsafe {
                        let p = a.alloc(layout);
                        assert!(!p.is_null(), "size {size} align {align}");
                        assert_eq!(p as usize % align, 0, "size {size} align {align}");
                        p.write_bytes(0xA5, size);
                        let q = a.realloc(p, layout, new_size);
                        assert_eq!(q as usize % align, 0, "{size} -> {new_size}, align {align}");
                        let kept = size.min(new_size);
                        assert!((0..kept).all(|i| *q.add(i) == 0xA5), "{size} -> {new_size}");
                        q.write_bytes(0x5A, new_size);
                        a.dealloc(q, Layout::from_size_align(new_size, align).unwrap());
                    }
                }
                // SAFETY: as above.
                unsafe {
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "zeroed {size} align {align}");
                    assert!(
                        (0..size).all(|i| *z.add(i) == 0),
                        "zeroed {size} align {align}"
                    );
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
