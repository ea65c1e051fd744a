/* A stand-in for the NVIDIA driver's libcuda.so.1 on a machine without a GPU (tests only).
 *
 * It exports the driver functions that libmxnet.so (mxnet-cu112 1.9.1) links against
 * (`nm -D --undefined-only libmxnet.so`) and those the CUDA runtime (libcudart.so.11.0) looks
 * up with dlsym, and answers like a driver that sees no GPU: cuInit returns
 * CUDA_ERROR_NO_DEVICE (100), as the real driver does; cudart then reports
 * cudaErrorNoDevice, which MXNet counts as 0 GPUs. cuDriverGetVersion says 12020 (a CUDA 12.2
 * driver, as on Colab) or $STUB_LIBCUDA_VERSION (e.g. 10020: too old for CUDA 11, cudart
 * reports cudaErrorInsufficientDriver). Every other entry point returns CUDA_ERROR_NO_DEVICE.
 * (Answering cuInit with success is not an option: cudart then needs the driver's private
 * export tables, cuGetExportTable.) Build:
 *     gcc -shared -fPIC -o libcuda.so.1 -Wl,-soname,libcuda.so.1 libcuda.c
 */
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_SUPPORTED 801

#define EXPORT __attribute__((visibility("default")))

EXPORT CUresult cuInit(unsigned int flags) {
    (void)flags;
    return CUDA_ERROR_NO_DEVICE;
}

EXPORT CUresult cuDriverGetVersion(int *version) {
    const char *fake = getenv("STUB_LIBCUDA_VERSION");
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = fake ? atoi(fake) : 12020;  /* default: a CUDA 12.2 driver, as on Colab */
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **str) {
    if (!str) return CUDA_ERROR_INVALID_VALUE;
    *str = error == CUDA_ERROR_NO_DEVICE ? "no CUDA-capable device is detected"
                                         : "stub libcuda: no GPU";
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorName(CUresult error, const char **str) {
    if (!str) return CUDA_ERROR_INVALID_VALUE;
    *str = error == CUDA_ERROR_NO_DEVICE ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_STUB";
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGetExportTable(const void **table, const void *id) {
    (void)id;
    if (table) *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* Every remaining driver entry point: there is no device to act on. */
#define NO_DEVICE(name) EXPORT CUresult name(void) { return CUDA_ERROR_NO_DEVICE; }
NO_DEVICE(cuDeviceGet)
NO_DEVICE(cuDevicePrimaryCtxRetain)
NO_DEVICE(cuGraphKernelNodeGetParams)
NO_DEVICE(cuGraphNodeGetType)
NO_DEVICE(cuLaunchKernel)
NO_DEVICE(cuModuleGetFunction)
NO_DEVICE(cuModuleLoadData)
NO_DEVICE(cuModuleLoadDataEx)
NO_DEVICE(cuModuleUnload)

typedef struct { const char *name; void *fn; } Entry;
static const Entry entries[] = {
    {"cuInit", (void *)cuInit},
    {"cuDriverGetVersion", (void *)cuDriverGetVersion},
    {"cuDeviceGetCount", (void *)cuDeviceGetCount},
    {"cuGetErrorString", (void *)cuGetErrorString},
    {"cuGetErrorName", (void *)cuGetErrorName},
    {"cuGetExportTable", (void *)cuGetExportTable},
    {"cuDeviceGet", (void *)cuDeviceGet},
};

/* cudart 11.3+ asks the driver for its entry points by name through this function. */
EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
                                 unsigned long long flags) {
    size_t i;
    (void)version; (void)flags;
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        if (strcmp(symbol, entries[i].name) == 0) {
            *pfn = entries[i].fn;
            return CUDA_SUCCESS;
        }
    }
    *pfn = NULL;
    return CUDA_ERROR_NOT_FOUND;
}
