// Runtime part of the C API: errors, devices, contexts, memory (ds4j_gpu.h).
#include "common.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <utility>

namespace ds4j {

static thread_local char g_error[1024] = "";

std::atomic<int64_t> launched_kernels{0}, launched_copies{0}, launched_graphs{0};

int device_cc_major(int device) {
    constexpr int MAXDEV = 64;
    static std::atomic<int> cc[MAXDEV];  // 0 unknown, else major compute capability + 1
    int v = device >= 0 && device < MAXDEV ? cc[device].load() : 0;
    if (v == 0) {
        int major = 0;
        if (hipDeviceGetAttribute(&major, hipDeviceAttributeComputeCapabilityMajor, device) != hipSuccess) {
            hipGetLastError();
            return 0;
        }
        v = major + 1;
        if (device >= 0 && device < MAXDEV) cc[device].store(v);
    }
    return v - 1;
}

int fail(int code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
    return code;
}

/** Why there is no usable runtime: names the missing driver library when it cannot be loaded. */
static int fail_no_runtime(hipError_t e, const char* what) {
#if defined(__NVCC__) && !defined(__HIPCC__)
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char* why = dlerror();
        return fail(DS4J_ERR_NO_RUNTIME,
                    "no GPU runtime: the NVIDIA driver library libcuda.so.1 is not installed or not on the loader path "
                    "(%s); %s returned %s",
                    why ? why : "dlopen failed", what, hipGetErrorName(e));
    }
    dlclose(h);
#endif
    return fail(DS4J_ERR_NO_RUNTIME, "no GPU runtime: %s: %s (%s)", what, hipGetErrorName(e), hipGetErrorString(e));
}

int fail_hip(hipError_t e, const char* what) {
    int code = DS4J_ERR_RUNTIME;
    if (e == hipErrorInsufficientDriver) return fail_no_runtime(e, what);
    if (e == hipErrorNoDevice || e == hipErrorInvalidDevice) code = DS4J_ERR_NO_DEVICE;
    if (e == hipErrorOutOfMemory) code = DS4J_ERR_OOM;
    if (e == hipErrorStreamCaptureUnsupported || e == hipErrorStreamCaptureInvalidated || e == hipErrorStreamCaptureMerge ||
        e == hipErrorStreamCaptureUnmatched || e == hipErrorStreamCaptureUnjoined || e == hipErrorStreamCaptureIsolation ||
        e == hipErrorStreamCaptureImplicit || e == hipErrorCapturedEvent || e == hipErrorStreamCaptureWrongThread)
        code = DS4J_ERR_CAPTURE;  // the call was refused because of a capture: recorded work never runs
    hipGetLastError();  // clear a non-sticky error so that later calls are not blamed for it
    return fail(code, "%s: %s (%s)", what, hipGetErrorName(e), hipGetErrorString(e));
}

/** The device this thread last made current through bind (-1: none). */
static thread_local int g_bound = -1;

int bind(ds4j_ctx* ctx) {
    if (g_bound == ctx->device) return DS4J_OK;
    hipError_t e = hipSetDevice(ctx->device);
    if (e != hipSuccess) return fail_hip(e, "hipSetDevice");
    g_bound = ctx->device;
    return DS4J_OK;
}

/**
 * Exchanges the launch fields of ctx (stream and scratch) with ctx->side[i - 1]: opens lane i when none is open
 * (ctx->lane = i), closes it when it is the open one (ctx->lane = 0).
 */
static void swap_lane(ds4j_ctx* c, int i) {
    std::swap(static_cast<Lane&>(*c), c->side[i - 1]);
    c->lane = c->lane == 0 ? i : 0;
}

/** Ends the open branch (ctx->lane > 0): its join event recorded on its stream, the context's own fields back. */
static hipError_t branch_close(ds4j_ctx* c) {
    const int i = c->lane;
    const hipError_t e = hipEventRecord(c->join_ev[i - 1], c->stream);
    swap_lane(c, i);
    c->unjoined |= 1u << (i - 1);  // also after a failed record: the join then reports the runtime's state
    return e;
}

/** The context's stream waits for lane i's ended branch, if it has one (none may be open). */
static hipError_t branch_wait(ds4j_ctx* c, int i) {
    if (!(c->unjoined & (1u << (i - 1)))) return hipSuccess;
    c->unjoined &= ~(1u << (i - 1));
    return hipStreamWaitEvent(c->stream, c->join_ev[i - 1], 0);
}

hipError_t branch_settle(ds4j_ctx* c) {
    hipError_t first = c->lane > 0 ? branch_close(c) : hipSuccess;
    for (int i = 1; i <= DS4J_BRANCH_LANES; i++) {
        const hipError_t e = branch_wait(c, i);
        if (first == hipSuccess) first = e;
    }
    return first;
}

/** Destroys the side lanes' streams and events (those made; the context's own stream is not one of them). */
static void destroy_lanes(ds4j_ctx* c) {
    for (int i = 0; i < DS4J_BRANCH_LANES; i++) {
        if (c->side[i].stream) hipStreamDestroy(c->side[i].stream);
        if (c->fork_ev[i]) hipEventDestroy(c->fork_ev[i]);
        if (c->join_ev[i]) hipEventDestroy(c->join_ev[i]);
        c->side[i].stream = nullptr;
        c->fork_ev[i] = c->join_ev[i] = nullptr;
    }
}

/**
 * DS4J_HC_COUNT_ROWS arrival counters in device memory, zero when this returns (their kernels leave them at zero after
 * every launch), or null when they could not be allocated (the kernels that count on them are not used then).
 */
static unsigned* zeroed_counters(hipStream_t s) {
    unsigned* p = nullptr;
    if (hipMalloc(&p, DS4J_HC_COUNT_ROWS * sizeof(unsigned)) != hipSuccess ||
        hipMemsetAsync(p, 0, DS4J_HC_COUNT_ROWS * sizeof(unsigned), s) != hipSuccess || hipStreamSynchronize(s) != hipSuccess) {
        hipGetLastError();
        if (p) hipFree(p);
        return nullptr;
    }
    return p;
}

/** Frees the scratch buffers (current and retired) of lane c. */
static void free_lane_scratch(Lane* c) {
    for (int i = 0; i < c->att_retired_n; i++) hipFree(c->att_retired[i]);
    if (c->att_scratch) hipFree(c->att_scratch);
    for (int i = 0; i < c->sk_retired_n; i++) hipFree(c->sk_retired[i]);
    if (c->sk_scratch) hipFree(c->sk_scratch);
    for (int i = 0; i < c->tc_retired_n; i++) hipFree(c->tc_retired[i]);
    if (c->tc_scratch) hipFree(c->tc_scratch);
}

bool measure_skip(const char* what) {
    static const char* list = [] {
        const char* e = getenv("DS4J_MEASURE_SKIP");
        if (e && *e) fprintf(stderr, "ds4j: DS4J_MEASURE_SKIP=%s: those operations are not run (measurement only)\n", e);
        return e ? e : "";
    }();
    const size_t n = strlen(what);
    for (const char* p = list; *p;) {
        const char* c = strchr(p, ',');
        const size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == n && strncmp(p, what, n) == 0) return true;
        if (!c) break;
        p = c + 1;
    }
    return false;
}

/**
 * DS4J_PROFILE_STEP=N (unset or not a positive number: never): the profiler collects from the N-th call of ds4j_embed
 * in the process (counted from 1, all contexts together; calls made while a step graph is captured are not counted)
 * to the next one, i.e. exactly one forward step's kernels when step graphs are off (every step begins with the
 * embedding). With DS4J_PROFILE_ROWS=R as well, only the calls of R rows count (the N-th step of R rows: a step of 64
 * decode entries without knowing how many steps of other sizes come before it); the window still ends at the next
 * call. For Nsight Compute started with --profile-from-start off; ctx's stream is waited for at both ends, so the
 * window holds that step's kernels and no others.
 */
void profile_step_mark(ds4j_ctx* ctx, int rows) {
    static const long long want = [] {
        const char* e = getenv("DS4J_PROFILE_STEP");
        const long long v = e ? atoll(e) : 0;
        return v > 0 ? v : 0ll;
    }();
    static const int want_rows = [] {
        const char* e = getenv("DS4J_PROFILE_ROWS");
        const int v = e ? atoi(e) : 0;
        return v > 0 ? v : 0;
    }();
    if (want == 0) return;
    // A captured step runs only when its graph is launched, and waiting for a stream that is being captured is
    // refused by the runtime and invalidates the capture: such calls neither count nor wait.
    if (ctx->capturing) return;
    static std::atomic<long long> calls{0};
    static std::atomic<int> state{0};  // 0: before the window, 1: in it, 2: after it
    bool start = false;
    if (state.load() == 1) {
        state.store(2);
    } else if (state.load() == 0 && (want_rows == 0 || rows == want_rows)) {
        if (calls.fetch_add(1) + 1 != want) return;
        state.store(1);
        start = true;
    } else {
        return;
    }
    // a failed wait (an earlier kernel's fault) stays pending for the embedding's launch check to report
    if (hipStreamSynchronize(ctx->stream) != hipSuccess) return;
    hipError_t e;
    if (start) {
        fprintf(stderr, "ds4j: profiling forward step %lld, %d rows (DS4J_PROFILE_STEP)\n", want, rows);
        e = hipProfilerStart();
    } else {
        e = hipProfilerStop();
        fprintf(stderr, "ds4j: forward step %lld was profiled (DS4J_PROFILE_STEP)\n", want);
    }
    if (e != hipSuccess) {
        // the window is a diagnostic: a runtime without profiler control (HIP may answer hipErrorNotSupported) must
        // not fail the step, which the launch check after the embedding would otherwise do with this pending error
        (void)hipGetLastError();
        fprintf(stderr, "ds4j: the profiler %s failed: %s (DS4J_PROFILE_STEP)\n", start ? "start" : "stop",
                hipGetErrorString(e));
    }
}

}  // namespace ds4j

using ds4j::fail;
using ds4j::fail_hip;

extern "C" {

int32_t ds4j_api_version(void) { return DS4J_GPU_API_VERSION; }

const char* ds4j_platform(void) { return DS4J_PLATFORM_NAME; }

const char* ds4j_last_error(void) { return ds4j::g_error; }

int32_t ds4j_device_count(int32_t* host_count) {
    DS4J_ARG(host_count, "ds4j_device_count: null count");
    *host_count = 0;
    int n = 0;
    hipError_t e = hipGetDeviceCount(&n);
    if (e == hipErrorNoDevice) return DS4J_OK;  // a working runtime with no device: count 0
    if (e != hipSuccess) return fail_hip(e, "hipGetDeviceCount");
    *host_count = n;
    return DS4J_OK;
}

int32_t ds4j_device_name(int32_t device, char* host_buf, int32_t len) {
    DS4J_ARG(host_buf && len > 0, "ds4j_device_name: null or empty buffer");
    hipDeviceProp_t p;
    hipError_t e = hipGetDeviceProperties(&p, device);
    if (e != hipSuccess) return fail_hip(e, "hipGetDeviceProperties");
    snprintf(host_buf, (size_t)len, "%s", p.name);
    return DS4J_OK;
}

int32_t ds4j_device_props(int32_t device, int32_t* host_cc_major, int32_t* host_cc_minor, int32_t* host_multiprocessors,
                          int64_t* host_total_bytes) {
    DS4J_ARG(host_cc_major && host_cc_minor && host_multiprocessors && host_total_bytes, "ds4j_device_props: null output");
    hipDeviceProp_t p;
    hipError_t e = hipGetDeviceProperties(&p, device);
    if (e != hipSuccess) return fail_hip(e, "hipGetDeviceProperties");
    *host_cc_major = p.major;
    *host_cc_minor = p.minor;
    *host_multiprocessors = p.multiProcessorCount;
    *host_total_bytes = (int64_t)p.totalGlobalMem;
    return DS4J_OK;
}

int32_t ds4j_device_memory(ds4j_ctx* ctx, int64_t* host_free_bytes, int64_t* host_total_bytes) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(host_free_bytes && host_total_bytes, "ds4j_device_memory: null output");
    size_t f = 0, t = 0;
    hipError_t e = hipMemGetInfo(&f, &t);
    if (e != hipSuccess) return fail_hip(e, "hipMemGetInfo");
    *host_free_bytes = (int64_t)f;
    *host_total_bytes = (int64_t)t;
    return DS4J_OK;
}

int32_t ds4j_ctx_create(int32_t device, ds4j_ctx** host_out) {
    DS4J_ARG(host_out, "ds4j_ctx_create: null output");
    *host_out = nullptr;
    int n = 0;
    hipError_t e = hipGetDeviceCount(&n);
    if (e != hipSuccess && e != hipErrorNoDevice) return fail_hip(e, "hipGetDeviceCount");
    if (device < 0 || device >= n)
        return fail(DS4J_ERR_NO_DEVICE, "no GPU device %d: the runtime sees %d device(s)", device, n);
    e = hipSetDevice(device);
    if (e != hipSuccess) return fail_hip(e, "hipSetDevice");
    ds4j::g_bound = device;
    hipStream_t s;
    e = hipStreamCreateWithFlags(&s, hipStreamNonBlocking);
    if (e != hipSuccess) return fail_hip(e, "hipStreamCreateWithFlags");
    ds4j_ctx* c = new ds4j_ctx;
    c->device = device;
    c->stream = s;
    // the branches' streams and events (ds4j_branch_begin), made here so that a capture never has to make them
    for (int i = 0; i < DS4J_BRANCH_LANES && e == hipSuccess; i++) {
        e = hipStreamCreateWithFlags(&c->side[i].stream, hipStreamNonBlocking);
        if (e == hipSuccess) e = hipEventCreateWithFlags(&c->fork_ev[i], hipEventDisableTiming);
        if (e == hipSuccess) e = hipEventCreateWithFlags(&c->join_ev[i], hipEventDisableTiming);
    }
    if (e != hipSuccess) {
        const int rc = fail_hip(e, "creating the branch streams and events");
        ds4j::destroy_lanes(c);
        hipStreamDestroy(s);
        delete c;
        return rc;
    }
    // the split mHC kernels' and the router's (ds4j_moe_gate_route) arrival counters
    c->hc_count = ds4j::zeroed_counters(s);
    c->route_count = ds4j::zeroed_counters(s);
    *host_out = c;
    return DS4J_OK;
}

int32_t ds4j_ctx_destroy(ds4j_ctx* ctx) {
    DS4J_CHECK_CTX(ctx);
    ds4j::graphs_destroy(ctx);
    ds4j::branch_settle(ctx);
    hipError_t e = hipStreamSynchronize(ctx->stream);
    hipError_t e2 = hipStreamDestroy(ctx->stream);
    ds4j::destroy_lanes(ctx);  // joined above: nothing of them is left to run
    if (ctx->hc_count) hipFree(ctx->hc_count);
    if (ctx->route_count) hipFree(ctx->route_count);
    ds4j::free_lane_scratch(ctx);
    for (ds4j::Lane& l : ctx->side) ds4j::free_lane_scratch(&l);
    delete ctx;
    if (e != hipSuccess) return fail_hip(e, "hipStreamSynchronize");
    if (e2 != hipSuccess) return fail_hip(e2, "hipStreamDestroy");
    return DS4J_OK;
}

int32_t ds4j_ctx_sync(ds4j_ctx* ctx) {
    DS4J_CHECK_CTX(ctx);
    DS4J_NOT_CAPTURING(ctx);
    hipError_t e = ds4j::branch_settle(ctx);
    if (e != hipSuccess) return fail_hip(e, "joining the branch");
    e = hipStreamSynchronize(ctx->stream);
    return e == hipSuccess ? DS4J_OK : fail_hip(e, "hipStreamSynchronize");
}

int32_t ds4j_branch_begin(ds4j_ctx* ctx, int32_t lane) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(lane >= 1 && lane <= DS4J_BRANCH_LANES, "ds4j_branch_begin: lane %d is not in 1..%d", lane, DS4J_BRANCH_LANES);
    // a branch left open, or this lane's last one unjoined (a step that failed between its calls), is ended and joined
    // first, so that nothing runs beside work it did not know of
    hipError_t e = ctx->lane > 0 ? ds4j::branch_close(ctx) : hipSuccess;
    if (e == hipSuccess) e = ds4j::branch_wait(ctx, lane);
    if (e == hipSuccess) e = hipEventRecord(ctx->fork_ev[lane - 1], ctx->stream);
    if (e == hipSuccess) e = hipStreamWaitEvent(ctx->side[lane - 1].stream, ctx->fork_ev[lane - 1], 0);
    if (e != hipSuccess) return fail_hip(e, "ds4j_branch_begin");
    ds4j::swap_lane(ctx, lane);
    return DS4J_OK;
}

int32_t ds4j_branch_end(ds4j_ctx* ctx) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(ctx->lane > 0, "ds4j_branch_end: no branch is open");
    const hipError_t e = ds4j::branch_close(ctx);
    return e == hipSuccess ? DS4J_OK : fail_hip(e, "ds4j_branch_end");
}

int32_t ds4j_branch_join(ds4j_ctx* ctx, int32_t lane) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(lane >= 1 && lane <= DS4J_BRANCH_LANES, "ds4j_branch_join: lane %d is not in 1..%d", lane, DS4J_BRANCH_LANES);
    DS4J_ARG(ctx->lane == 0, "ds4j_branch_join: a branch is still open (ds4j_branch_end)");
    const hipError_t e = ds4j::branch_wait(ctx, lane);
    return e == hipSuccess ? DS4J_OK : fail_hip(e, "ds4j_branch_join");
}

int32_t ds4j_malloc(ds4j_ctx* ctx, int64_t bytes, void** host_out) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(host_out && bytes >= 0, "ds4j_malloc: bad arguments (bytes %lld)", (long long)bytes);
    *host_out = nullptr;
    void* p = nullptr;
    hipError_t e = hipMalloc(&p, (size_t)(bytes > 0 ? bytes : 1));
    if (e != hipSuccess) {
        hipGetLastError();
        size_t f = 0, t = 0;
        hipMemGetInfo(&f, &t);
        if (e == hipErrorOutOfMemory)
            return fail(DS4J_ERR_OOM, "out of device memory: %.1f MiB requested, %.1f MiB free of %.1f MiB",
                        bytes / 1048576.0, f / 1048576.0, t / 1048576.0);
        return fail_hip(e, "hipMalloc");
    }
    *host_out = p;
    return DS4J_OK;
}

int32_t ds4j_free(ds4j_ctx* ctx, void* ptr) {
    DS4J_CHECK_CTX(ctx);
    if (!ptr) return DS4J_OK;
    DS4J_NOT_CAPTURING(ctx);
    hipError_t e = hipFree(ptr);
    return e == hipSuccess ? DS4J_OK : fail_hip(e, "hipFree");
}

int32_t ds4j_upload(ds4j_ctx* ctx, void* dst, const void* host_src, int64_t bytes) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(bytes >= 0 && (bytes == 0 || (dst && host_src)), "ds4j_upload: bad arguments");
    if (bytes == 0) return DS4J_OK;
    DS4J_NOT_CAPTURING(ctx);
    hipError_t e = hipMemcpyAsync(dst, host_src, (size_t)bytes, hipMemcpyHostToDevice, ctx->stream);
    if (e != hipSuccess) return fail_hip(e, "hipMemcpyAsync (upload)");
    ds4j::launched_copies.fetch_add(1, std::memory_order_relaxed);
    // the host buffer may be reused or freed on return: wait for the copy
    e = hipStreamSynchronize(ctx->stream);
    return e == hipSuccess ? DS4J_OK : fail_hip(e, "hipStreamSynchronize (upload)");
}

int32_t ds4j_download(ds4j_ctx* ctx, void* host_dst, const void* src, int64_t bytes) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(bytes >= 0 && (bytes == 0 || (src && host_dst)), "ds4j_download: bad arguments");
    DS4J_NOT_CAPTURING(ctx);
    if (bytes > 0) {
        hipError_t e = hipMemcpyAsync(host_dst, src, (size_t)bytes, hipMemcpyDeviceToHost, ctx->stream);
        if (e != hipSuccess) return fail_hip(e, "hipMemcpyAsync (download)");
    }
    hipError_t e = hipStreamSynchronize(ctx->stream);
    return e == hipSuccess ? DS4J_OK : fail_hip(e, "hipStreamSynchronize (download)");
}

int32_t ds4j_copy(ds4j_ctx* ctx, void* dst, const void* src, int64_t bytes) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(bytes >= 0 && (bytes == 0 || (dst && src)), "ds4j_copy: bad arguments");
    if (bytes == 0) return DS4J_OK;
    hipError_t e = hipMemcpyAsync(dst, src, (size_t)bytes, hipMemcpyDeviceToDevice, ctx->stream);
    if (e != hipSuccess) return fail_hip(e, "hipMemcpyAsync (device to device)");
    ds4j::launched_copies.fetch_add(1, std::memory_order_relaxed);
    return DS4J_OK;
}

int32_t ds4j_memset(ds4j_ctx* ctx, void* dst, int32_t value, int64_t bytes) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(bytes >= 0 && (bytes == 0 || dst), "ds4j_memset: bad arguments");
    if (bytes == 0) return DS4J_OK;
    hipError_t e = hipMemsetAsync(dst, value, (size_t)bytes, ctx->stream);
    if (e != hipSuccess) return fail_hip(e, "hipMemsetAsync");
    ds4j::launched_copies.fetch_add(1, std::memory_order_relaxed);
    return DS4J_OK;
}

int32_t ds4j_launch_counts(int64_t* host_kernels, int64_t* host_copies, int64_t* host_graphs) {
    if (host_kernels) *host_kernels = ds4j::launched_kernels.load(std::memory_order_relaxed);
    if (host_copies) *host_copies = ds4j::launched_copies.load(std::memory_order_relaxed);
    if (host_graphs) *host_graphs = ds4j::launched_graphs.load(std::memory_order_relaxed);
    return DS4J_OK;
}

int32_t ds4j_seqs_bounds(ds4j_ctx* ctx, int32_t on, int64_t max_entries, int64_t first_position) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(max_entries >= 0, "ds4j_seqs_bounds: negative max_entries %lld", (long long)max_entries);
    DS4J_ARG(first_position >= 0, "ds4j_seqs_bounds: negative first_position %lld", (long long)first_position);
    ctx->fixed_grids = on != 0;
    ctx->fixed_entries = max_entries;
    ctx->fixed_first = on != 0 ? first_position : 0;
    return DS4J_OK;
}

}  // extern "C"
