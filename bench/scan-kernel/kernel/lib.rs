#![no_std]
//! A scan of `rows` int8 rows against one i16 query, as `VectorIndex::scores_into` does it (`pairs` = 1) and as it
//! did before, one row at a time (`pairs` = 0), with loci's own kernels.

#[path = "../../../engine/src/index/vectors/simd.rs"]
mod simd;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    core::arch::wasm32::unreachable()
}

/// `bytes` of fresh memory, 64 KB aligned (the page allocates its buffers once).
#[no_mangle]
pub extern "C" fn alloc_bytes(bytes: usize) -> *mut u8 {
    match core::arch::wasm32::memory_grow(0, bytes.div_ceil(65536)) {
        usize::MAX => core::ptr::null_mut(),
        page => (page * 65536) as *mut u8,
    }
}

/// # Safety
/// The pointers hold `rows × dim` codes, `rows` scales and outputs, and `dim` query codes.
#[no_mangle]
pub unsafe extern "C" fn scan(
    pairs: u32,
    codes: *const i8,
    scales: *const f32,
    rows: usize,
    dim: usize,
    query: *const i16,
    q_scale: f32,
    out: *mut f32,
) {
    let (codes, scales) = (core::slice::from_raw_parts(codes, rows * dim), core::slice::from_raw_parts(scales, rows));
    let (q, out) = (core::slice::from_raw_parts(query, dim), core::slice::from_raw_parts_mut(out, rows));
    if pairs == 0 {
        for (r, row) in codes.chunks_exact(dim).enumerate() {
            out[r] = simd::dot_i8_i16(row, q) as f32 * scales[r] * q_scale;
        }
        return;
    }
    let mut r = 0;
    for two in codes.chunks_exact(2 * dim) {
        let (x, y) = simd::dot2_i8_i16(&two[..dim], &two[dim..], q);
        out[r] = x as f32 * scales[r] * q_scale;
        out[r + 1] = y as f32 * scales[r + 1] * q_scale;
        r += 2;
    }
    if r < rows {
        out[r] = simd::dot_i8_i16(&codes[r * dim..], q) as f32 * scales[r] * q_scale;
    }
}
