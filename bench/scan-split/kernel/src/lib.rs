#![no_std]
use core::arch::wasm32::*;
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! { core::arch::wasm32::unreachable() }
extern crate alloc;
struct Bump;
static mut HEAP_TOP: usize = 0;
unsafe impl core::alloc::GlobalAlloc for Bump {
    unsafe fn alloc(&self, l: core::alloc::Layout) -> *mut u8 {
        if HEAP_TOP == 0 { HEAP_TOP = (memory_size(0) * 65536) as usize; }
        let need = (l.size() + 15) & !15;
        let pages = (need + 65535) / 65536;
        let old = memory_grow(0, pages);
        if old == usize::MAX { return core::ptr::null_mut(); }
        (old * 65536) as *mut u8
    }
    unsafe fn dealloc(&self, _: *mut u8, _: core::alloc::Layout) {}
}
#[global_allocator]
static A: Bump = Bump;

#[no_mangle]
pub extern "C" fn alloc_bytes(n: usize) -> *mut u8 {
    unsafe { alloc::alloc::alloc(core::alloc::Layout::from_size_align(n, 16).unwrap()) }
}

#[inline(always)]
unsafe fn dot(a: *const i8, b: *const i16, n: usize) -> i32 {
    let steps = n / 16;
    let (mut acc0, mut acc1, mut acc2, mut acc3) = (i32x4_splat(0), i32x4_splat(0), i32x4_splat(0), i32x4_splat(0));
    let pairs = steps / 2;
    for i in 0..pairs {
        let at = i * 32;
        let va = v128_load(a.add(at) as *const v128);
        let vc = v128_load(a.add(at + 16) as *const v128);
        let vb0 = v128_load(b.add(at) as *const v128);
        let vb1 = v128_load(b.add(at + 8) as *const v128);
        let vb2 = v128_load(b.add(at + 16) as *const v128);
        let vb3 = v128_load(b.add(at + 24) as *const v128);
        acc0 = i32x4_add(acc0, i32x4_dot_i16x8(i16x8_extend_low_i8x16(va), vb0));
        acc1 = i32x4_add(acc1, i32x4_dot_i16x8(i16x8_extend_high_i8x16(va), vb1));
        acc2 = i32x4_add(acc2, i32x4_dot_i16x8(i16x8_extend_low_i8x16(vc), vb2));
        acc3 = i32x4_add(acc3, i32x4_dot_i16x8(i16x8_extend_high_i8x16(vc), vb3));
    }
    let acc = i32x4_add(i32x4_add(acc0, acc2), i32x4_add(acc1, acc3));
    i32x4_extract_lane::<0>(acc) + i32x4_extract_lane::<1>(acc) + i32x4_extract_lane::<2>(acc) + i32x4_extract_lane::<3>(acc)
}

/// scores[r] = dot(codes[r], q) * scales[r] * q_scale for rows [0, rows).
#[no_mangle]
pub unsafe extern "C" fn scan(codes: *const i8, scales: *const f32, rows: usize, dim: usize, q: *const i16, q_scale: f32, out: *mut f32) {
    for r in 0..rows {
        *out.add(r) = dot(codes.add(r * dim), q, dim) as f32 * *scales.add(r) * q_scale;
    }
}
