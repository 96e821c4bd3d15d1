//! GPU memory as a dmabuf source: device memory allocated through the CUDA driver API and
//! exported with `cuMemGetHandleForAddressRange(..., CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, ...)`.
//! `libcuda.so.1` is loaded at run time, so nothing is needed to build and a host without a GPU
//! gets a clear error.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};
use std::os::fd::{FromRawFd, OwnedFd};

use thiserror::Error;

/// Why a CUDA step failed.
#[derive(Debug, Error)]
pub enum CudaError {
    /// The driver library is not there.
    #[error("cannot load libcuda.so.1 ({0}): install the NVIDIA driver, or pick another --source")]
    NoLibrary(String),
    /// The library lacks an entry point.
    #[error("libcuda.so.1 has no {0}: the NVIDIA driver is too old (dmabuf export needs CUDA 11.7 and a 515+ driver)")]
    NoSymbol(&'static str),
    /// A call returned an error.
    #[error("{call} failed: CUDA error {code} ({name})")]
    Call {
        /// The function.
        call: &'static str,
        /// `CUresult`.
        code: i32,
        /// `cuGetErrorString`'s text.
        name: String,
    },
    /// The GPU cannot export dmabufs.
    #[error("GPU {0} does not support dmabuf export (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0; it needs the open kernel modules or a data-center GPU with a recent driver)")]
    NoDmaBuf(i32),
}

type CuResult = c_int;
type CuDevicePtr = c_ulonglong;

/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD`.
const HANDLE_TYPE_DMA_BUF_FD: c_int = 1;
/// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
const ATTRIBUTE_DMA_BUF_SUPPORTED: c_int = 124;

struct Api {
    handle: *mut c_void,
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CuResult,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult,
    primary_ctx_release: unsafe extern "C" fn(c_int) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(*mut c_void) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult,
    memset_d8: unsafe extern "C" fn(CuDevicePtr, u8, usize) -> CuResult,
    get_handle:
        unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize, c_int, c_ulonglong) -> CuResult,
    error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
}

impl Api {
    fn load() -> Result<Self, CudaError> {
        // SAFETY: dlopen reads a NUL-terminated name; the handle is kept for the life of `Api`.
        let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW) };
        if handle.is_null() {
            // SAFETY: dlerror returns a thread-local message or null.
            let why = unsafe { libc::dlerror() };
            let why = if why.is_null() {
                "not found".to_string()
            } else {
                // SAFETY: non-null dlerror results are NUL-terminated strings.
                unsafe { CStr::from_ptr(why) }
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(CudaError::NoLibrary(why));
        }
        macro_rules! sym {
            ($name:literal, $ty:ty) => {{
                // SAFETY: looks a symbol up in the handle opened above.
                let p = unsafe { libc::dlsym(handle, concat!($name, "\0").as_ptr().cast()) };
                if p.is_null() {
                    // SAFETY: the handle came from dlopen and nothing else uses it.
                    unsafe { libc::dlclose(handle) };
                    return Err(CudaError::NoSymbol($name));
                }
                // SAFETY: the CUDA driver API documents this symbol with the C signature of the
                // field it is stored in.
                unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
            }};
        }
        Ok(Self {
            handle,
            init: sym!("cuInit", unsafe extern "C" fn(c_uint) -> CuResult),
            device_get: sym!(
                "cuDeviceGet",
                unsafe extern "C" fn(*mut c_int, c_int) -> CuResult
            ),
            device_get_attribute: sym!(
                "cuDeviceGetAttribute",
                unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult
            ),
            primary_ctx_retain: sym!(
                "cuDevicePrimaryCtxRetain",
                unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult
            ),
            primary_ctx_release: sym!(
                "cuDevicePrimaryCtxRelease_v2",
                unsafe extern "C" fn(c_int) -> CuResult
            ),
            ctx_set_current: sym!(
                "cuCtxSetCurrent",
                unsafe extern "C" fn(*mut c_void) -> CuResult
            ),
            mem_alloc: sym!(
                "cuMemAlloc_v2",
                unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult
            ),
            mem_free: sym!(
                "cuMemFree_v2",
                unsafe extern "C" fn(CuDevicePtr) -> CuResult
            ),
            memcpy_dtoh: sym!(
                "cuMemcpyDtoH_v2",
                unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult
            ),
            memset_d8: sym!(
                "cuMemsetD8_v2",
                unsafe extern "C" fn(CuDevicePtr, u8, usize) -> CuResult
            ),
            get_handle: sym!(
                "cuMemGetHandleForAddressRange",
                unsafe extern "C" fn(
                    *mut c_void,
                    CuDevicePtr,
                    usize,
                    c_int,
                    c_ulonglong,
                ) -> CuResult
            ),
            error_string: sym!(
                "cuGetErrorString",
                unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult
            ),
        })
    }

    fn check(&self, call: &'static str, code: CuResult) -> Result<(), CudaError> {
        if code == 0 {
            return Ok(());
        }
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorString stores a pointer to a static string (or leaves it null).
        let name = if unsafe { (self.error_string)(code, &mut text) } == 0 && !text.is_null() {
            // SAFETY: a non-null result is a static NUL-terminated string.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        } else {
            "unknown".into()
        };
        Err(CudaError::Call { call, code, name })
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen; every pointer into the library is dropped with
        // `self`.
        unsafe { libc::dlclose(self.handle) };
    }
}

/// Device memory on a GPU, freed when dropped.
pub struct CudaMemory {
    api: Api,
    device: c_int,
    ptr: CuDevicePtr,
    size: usize,
}

// SAFETY: the CUDA driver API is thread-safe; the primary context is made current on the
// calling thread before each call that needs it.
unsafe impl Send for CudaMemory {}

impl std::fmt::Debug for CudaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaMemory")
            .field("device", &self.device)
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("size", &self.size)
            .finish()
    }
}

impl CudaMemory {
    /// Allocates `size` bytes (rounded up to 2 MiB, the GPU's page) on GPU `ordinal`, zeroed,
    /// after checking that the GPU can export dmabufs.
    ///
    /// # Errors
    ///
    /// [`CudaError`] naming the step that failed.
    pub fn alloc(ordinal: i32, size: usize) -> Result<Self, CudaError> {
        let api = Api::load()?;
        // SAFETY: each call below passes pointers to live locals, as the API documents.
        unsafe {
            api.check("cuInit", (api.init)(0))?;
            let mut device = 0;
            api.check("cuDeviceGet", (api.device_get)(&mut device, ordinal))?;
            let mut supported = 0;
            api.check(
                "cuDeviceGetAttribute(DMA_BUF_SUPPORTED)",
                (api.device_get_attribute)(&mut supported, ATTRIBUTE_DMA_BUF_SUPPORTED, device),
            )?;
            if supported == 0 {
                return Err(CudaError::NoDmaBuf(ordinal));
            }
            let mut ctx = std::ptr::null_mut();
            api.check(
                "cuDevicePrimaryCtxRetain",
                (api.primary_ctx_retain)(&mut ctx, device),
            )?;
            api.check("cuCtxSetCurrent", (api.ctx_set_current)(ctx))?;
            let size = size.next_multiple_of(2 << 20);
            let mut ptr = 0;
            if let Err(e) = api.check("cuMemAlloc", (api.mem_alloc)(&mut ptr, size)) {
                (api.primary_ctx_release)(device);
                return Err(e);
            }
            let memory = Self {
                api,
                device,
                ptr,
                size,
            };
            memory
                .api
                .check("cuMemsetD8", (memory.api.memset_d8)(ptr, 0, size))?;
            Ok(memory)
        }
    }

    /// Bytes allocated.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The GPU virtual address of the allocation.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// Exports the whole allocation as a dmabuf descriptor.
    ///
    /// # Errors
    ///
    /// [`CudaError::Call`] when the driver refuses.
    pub fn export_dmabuf(&self) -> Result<OwnedFd, CudaError> {
        let mut fd: c_int = -1;
        // SAFETY: the handle is an int the driver fills with a new descriptor.
        let code = unsafe {
            (self.api.get_handle)(
                (&mut fd as *mut c_int).cast(),
                self.ptr,
                self.size,
                HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        };
        self.api
            .check("cuMemGetHandleForAddressRange(DMA_BUF_FD)", code)?;
        // SAFETY: on success the driver returned a new descriptor nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Copies `out.len()` bytes from offset `offset` of the allocation to the host.
    ///
    /// # Errors
    ///
    /// [`CudaError::Call`], also for a range outside the allocation (checked first, as
    /// `CUDA_ERROR_INVALID_VALUE`).
    pub fn copy_to_host(&self, offset: usize, out: &mut [u8]) -> Result<(), CudaError> {
        if offset
            .checked_add(out.len())
            .is_none_or(|end| end > self.size)
        {
            return Err(CudaError::Call {
                call: "cuMemcpyDtoH",
                code: 1,
                name: "range outside the allocation".into(),
            });
        }
        // SAFETY: `out` is live host memory of `out.len()` bytes; the device range was checked.
        let code = unsafe {
            (self.api.memcpy_dtoh)(out.as_mut_ptr().cast(), self.ptr + offset as u64, out.len())
        };
        self.api.check("cuMemcpyDtoH", code)
    }
}

impl Drop for CudaMemory {
    fn drop(&mut self) {
        // SAFETY: frees the allocation made in `alloc` and releases its context, once.
        unsafe {
            (self.api.mem_free)(self.ptr);
            (self.api.primary_ctx_release)(self.device);
        }
    }
}
