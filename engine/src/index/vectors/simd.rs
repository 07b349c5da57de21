//! The wasm simd128 forms of the int8 dot products (`super::dot_i8_i16`, `super::dot2_i8_i16`). A file of its own,
//! with nothing but `core`, so that `bench/scan-kernel` builds these very functions into a standalone page to time
//! them against each other.

use core::arch::wasm32::*;

/// 16 codes per step: sign-extend the i8 lanes to two i16x8 and multiply-add pairs into i32x4 with
/// `i32x4.dot_i16x8_s`. Two steps per iteration into four accumulators, so consecutive multiply-adds do not
/// wait on each other.
pub fn dot_i8_i16(a: &[i8], b: &[i16]) -> i32 {
    let n = a.len().min(b.len());
    let steps = n / 16;
    let mut acc0 = i32x4_splat(0);
    let mut acc1 = i32x4_splat(0);
    let mut acc2 = i32x4_splat(0);
    let mut acc3 = i32x4_splat(0);
    let pairs = steps / 2;
    for i in 0..pairs {
        // SAFETY: `i * 32 + 32 <= n` bounds all four loads of each array, as below.
        unsafe {
            let at = i * 32;
            let va = v128_load(a.as_ptr().add(at) as *const v128);
            let vc = v128_load(a.as_ptr().add(at + 16) as *const v128);
            let vb0 = v128_load(b.as_ptr().add(at) as *const v128);
            let vb1 = v128_load(b.as_ptr().add(at + 8) as *const v128);
            let vb2 = v128_load(b.as_ptr().add(at + 16) as *const v128);
            let vb3 = v128_load(b.as_ptr().add(at + 24) as *const v128);
            acc0 = i32x4_add(acc0, i32x4_dot_i16x8(i16x8_extend_low_i8x16(va), vb0));
            acc1 = i32x4_add(acc1, i32x4_dot_i16x8(i16x8_extend_high_i8x16(va), vb1));
            acc2 = i32x4_add(acc2, i32x4_dot_i16x8(i16x8_extend_low_i8x16(vc), vb2));
            acc3 = i32x4_add(acc3, i32x4_dot_i16x8(i16x8_extend_high_i8x16(vc), vb3));
        }
    }
    acc0 = i32x4_add(acc0, acc2);
    acc1 = i32x4_add(acc1, acc3);
    for i in pairs * 2..steps {
        // SAFETY: `i * 16 + 16 <= n` bounds both loads (16 i8 = 16 bytes; 2 × 8 i16 = 32 bytes); v128_load
        // has no alignment requirement.
        unsafe {
            let va = v128_load(a.as_ptr().add(i * 16) as *const v128);
            let vb0 = v128_load(b.as_ptr().add(i * 16) as *const v128);
            let vb1 = v128_load(b.as_ptr().add(i * 16 + 8) as *const v128);
            let lo = i16x8_extend_low_i8x16(va);
            let hi = i16x8_extend_high_i8x16(va);
            acc0 = i32x4_add(acc0, i32x4_dot_i16x8(lo, vb0));
            acc1 = i32x4_add(acc1, i32x4_dot_i16x8(hi, vb1));
        }
    }
    let acc = i32x4_add(acc0, acc1);
    let mut sum = i32x4_extract_lane::<0>(acc)
        + i32x4_extract_lane::<1>(acc)
        + i32x4_extract_lane::<2>(acc)
        + i32x4_extract_lane::<3>(acc);
    for j in steps * 16..n {
        sum += a[j] as i32 * b[j] as i32;
    }
    sum
}

/// [`dot_i8_i16`] of two rows at once: each step loads 16 query codes once for both rows, two accumulators a
/// row.
pub fn dot2_i8_i16(a0: &[i8], a1: &[i8], b: &[i16]) -> (i32, i32) {
    let n = a0.len().min(a1.len()).min(b.len());
    let steps = n / 16;
    let (mut x0, mut x1, mut y0, mut y1) = (i32x4_splat(0), i32x4_splat(0), i32x4_splat(0), i32x4_splat(0));
    for i in 0..steps {
        // SAFETY: `i * 16 + 16 <= n` bounds the loads of each array (16 i8 = 16 bytes; 2 × 8 i16 = 32 bytes);
        // v128_load has no alignment requirement.
        unsafe {
            let at = i * 16;
            let va = v128_load(a0.as_ptr().add(at) as *const v128);
            let vc = v128_load(a1.as_ptr().add(at) as *const v128);
            let vb0 = v128_load(b.as_ptr().add(at) as *const v128);
            let vb1 = v128_load(b.as_ptr().add(at + 8) as *const v128);
            x0 = i32x4_add(x0, i32x4_dot_i16x8(i16x8_extend_low_i8x16(va), vb0));
            x1 = i32x4_add(x1, i32x4_dot_i16x8(i16x8_extend_high_i8x16(va), vb1));
            y0 = i32x4_add(y0, i32x4_dot_i16x8(i16x8_extend_low_i8x16(vc), vb0));
            y1 = i32x4_add(y1, i32x4_dot_i16x8(i16x8_extend_high_i8x16(vc), vb1));
        }
    }
    let lanes = |v: v128| {
        i32x4_extract_lane::<0>(v)
            + i32x4_extract_lane::<1>(v)
            + i32x4_extract_lane::<2>(v)
            + i32x4_extract_lane::<3>(v)
    };
    let (mut x, mut y) = (lanes(i32x4_add(x0, x1)), lanes(i32x4_add(y0, y1)));
    for j in steps * 16..n {
        x += a0[j] as i32 * b[j] as i32;
        y += a1[j] as i32 * b[j] as i32;
    }
    (x, y)
}
