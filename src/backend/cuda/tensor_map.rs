//! TMA tensor maps (`CUtensorMap`, made by the driver's `cuTensorMapEncodeTiled`): what a
//! kernel's `cp.async.bulk.tensor` reads a global matrix through (kernels/tma.cuh).

use cudarc::driver::sys;

use super::memory::device_err;
use super::DType;
use crate::backend::OpResult;

/// `hopscore::TmaMap`: a `CUtensorMap`'s 128 opaque bytes, 64-byte aligned, passed inside
/// a kernel's `__grid_constant__` parameter struct.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
pub struct TmaMap(pub [u64; 16]);

/// How a box lands in shared memory: the 16-byte chunks of each row permuted by the
/// row's address bits (the layouts of a swizzled wgmma operand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swizzle {
    /// Rows of up to 128 bytes, permuted within 1,024-byte atoms of 8 rows.
    B128,
}

/// The map of a row-major `[rows, cols]` matrix of `dtype` at device address `ptr`,
/// read in boxes of `box_cols` × `box_rows` elements; elements outside the matrix read
/// as zero. The driver's checks apply: `ptr` 16-byte aligned, rows a multiple of 16
/// bytes apart, boxes of at most 256 rows and columns, a box row at most the swizzle span.
pub fn tensor_map_2d(
    op: &'static str,
    ptr: u64,
    dtype: DType,
    [rows, cols]: [usize; 2],
    [box_rows, box_cols]: [u32; 2],
    swizzle: Swizzle,
) -> OpResult<TmaMap> {
    use sys::CUtensorMapDataType_enum as D;
    let data_type = match dtype {
        DType::F32 => D::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        DType::Bf16 => D::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F16 => D::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
    };
    let swizzle = match swizzle {
        Swizzle::B128 => sys::CUtensorMapSwizzle_enum::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    let dims = [cols as u64, rows as u64];
    let strides = [(cols * dtype.size()) as u64];
    let boxes = [box_cols, box_rows];
    let element_strides = [1u32; 2];
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: every pointer is to a live local array of the rank's length (the strides
    // one shorter), and `map` is a CUtensorMap the driver fills.
    let result = unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            data_type,
            2,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave_enum::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion_enum::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            sys::CUtensorMapFloatOOBfill_enum::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if result != sys::CUresult::CUDA_SUCCESS {
        return Err(device_err(
            op,
            format!(
                "cuTensorMapEncodeTiled of a [{rows}, {cols}] {dtype:?} matrix in boxes of \
                 {box_rows} × {box_cols}: {result:?}"
            ),
        ));
    }
    // SAFETY: the driver initialised the map (and it was zeroed before).
    Ok(TmaMap(unsafe { map.assume_init() }.opaque))
}
