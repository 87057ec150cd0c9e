/*
 * A fake NVML driver library (libnvidia-ml.so.1) for testing ecoguard's meter without a GPU.
 *
 * Power is a known function of time, so the exact energy of any window is known analytically:
 *   P_i(t) = base_i + amp_i * sin(2*pi*t/period_i + phase_i)          [W], t = CLOCK_MONOTONIC s
 *   E_i(t) = base_i*t - amp_i*period_i/(2*pi) * (cos(2*pi*t/period_i + phase_i) - cos(phase_i))
 * The total-energy counter (mJ) is quantised like real hardware: it only changes at update
 * instants u = offset + k*update_s, and reports E_i at the last such instant.
 * Field 186 (instant power) reports P_i(t) now; nvmlDeviceGetPowerUsage reports the mean over the
 * last second (as recent drivers do).
 *
 * Configured from environment variables, re-read on every nvmlInit*. Init fails with
 * DRIVER_NOT_LOADED unless FAKE_NVML_ENABLE=1.
 *   FAKE_NVML_GPUS (2), FAKE_NVML_NAME, FAKE_NVML_ARCH (7 = Ampere), FAKE_NVML_CC ("8.0"),
 *   FAKE_NVML_MEM_MB (81920), FAKE_NVML_TDP_W (400),
 *   FAKE_NVML_BASE_W, FAKE_NVML_AMP_W, FAKE_NVML_PERIOD_S, FAKE_NVML_PHASE: comma lists, one value
 *     per GPU (the last value repeats),
 *   FAKE_NVML_UPDATE_S (0.1), FAKE_NVML_UPDATE_OFFSET_S (0.037),
 *   FAKE_NVML_COUNTER ("1"; "0": the counter answers NOT_SUPPORTED, like pre-Volta GPUs),
 *   FAKE_NVML_LOST_AFTER_S / FAKE_NVML_LOST_GPU: that GPU (-1: all) answers GPU_IS_LOST after
 *     that many seconds since init,
 *   FAKE_NVML_RESET_AFTER_S: the counter restarts from zero that many seconds after init,
 *   FAKE_NVML_NOISE_W: uniform noise of +-that many watts on instant power readings (field 186),
 *   FAKE_NVML_CLOCK ("monotonic"; "manual": see below), FAKE_NVML_CLOCK_TICK_S (0.00001).
 * The same formulas are mirrored in ecoguard/testing/fake_nvml/__init__.py.
 *
 * Time. By default t is CLOCK_MONOTONIC, so the fake runs in real time. With
 * FAKE_NVML_CLOCK=manual, t is a clock of the library's own that moves only when a test moves it
 * (fake_nvml_clock_advance) and by FAKE_NVML_CLOCK_TICK_S on each reading of energy or power (a
 * read takes time on real hardware too, and a loop polling the counter must see it change). The
 * manual clock starts at 1000 s, never runs back and survives re-initialisation; a test shares it
 * with the meter through fake_nvml_clock_now (FakeNvmlClock in Python) and sleeps by advancing it.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef unsigned int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_GPU_IS_LOST 15
#define MAX_GPUS 16
#define FI_DEV_POWER_INSTANT 186

typedef struct {
    unsigned int index;
    char name[96];
    char uuid[96];
    double base_w, amp_w, period_s, phase;
} fake_device;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    uint32_t fieldId;
    uint32_t scopeId;
    int64_t timestamp;
    int64_t latencyUsec;
    unsigned int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

static fake_device devices[MAX_GPUS];
static unsigned int gpu_count = 0;
static int initialised = 0;
static double init_time = 0.0;
static double update_s = 0.1, update_offset_s = 0.037;
static int counter_supported = 1;
static double lost_after_s = -1.0, reset_after_s = -1.0;
static int lost_gpu = -1;
static unsigned int arch = 7, mem_mb = 81920, tdp_w = 400;
static int cc_major = 8, cc_minor = 0;
static double noise_w = 0.0;
static uint64_t noise_state = 88172645463325252ULL;

/* Uniform in [-1, 1): sensor noise on instant power readings (the energy stays exact). */
static double noise_unit(void) {
    noise_state ^= noise_state << 13;
    noise_state ^= noise_state >> 7;
    noise_state ^= noise_state << 17;
    return (double)(noise_state >> 11) / (double)(1ULL << 52) - 1.0;
}
static char name_template[96] = "NVIDIA A800-SXM4-80GB";

static int clock_manual = 0;
static int64_t manual_ns = 1000000000000LL; /* the manual clock, in ns (atomic: ctypes calls
                                               run without the GIL) */
static int64_t tick_ns = 10000;

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The time now, without moving the manual clock. */
static double now_s(void) {
    if (!clock_manual) return monotonic_s();
    return (double)__atomic_load_n(&manual_ns, __ATOMIC_SEQ_CST) * 1e-9;
}

/* The time of a reading: the manual clock moves on by one tick first. */
static double reading_s(void) {
    if (!clock_manual) return monotonic_s();
    return (double)__atomic_add_fetch(&manual_ns, tick_ns, __ATOMIC_SEQ_CST) * 1e-9;
}

/* Exported for tests (FakeNvmlClock): the library's time in seconds, whichever clock it runs on. */
double fake_nvml_clock_now(void) { return now_s(); }

/* 1 when the manual clock is in use (set by the last nvmlInit from FAKE_NVML_CLOCK), else 0. */
int fake_nvml_clock_is_manual(void) { return clock_manual; }

/* The time of the last successful nvmlInit (s): lost_after_s and reset_after_s count from it. */
double fake_nvml_init_time(void) { return init_time; }

/* Move the manual clock on by `seconds` (>= 0). Returns 0; 1 when the clock is not manual (nothing
   moves); 2 when seconds is negative or not a number. */
int fake_nvml_clock_advance(double seconds) {
    if (!(seconds >= 0.0) || seconds > 1e9) return 2;
    if (!clock_manual) return 1;
    __atomic_add_fetch(&manual_ns, (int64_t)llround(seconds * 1e9), __ATOMIC_SEQ_CST);
    return 0;
}

static double env_double(const char *key, double fallback) {
    const char *raw = getenv(key);
    return (raw && *raw) ? atof(raw) : fallback;
}

/* The i-th entry of a comma list; the last entry repeats; fallback when unset. */
static double env_list(const char *key, unsigned int i, double fallback) {
    const char *raw = getenv(key);
    if (!raw || !*raw) return fallback;
    double value = fallback;
    unsigned int n = 0;
    const char *p = raw;
    while (*p) {
        value = atof(p);
        if (n == i) return value;
        const char *comma = strchr(p, ',');
        if (!comma) break;
        p = comma + 1;
        n++;
    }
    return value;
}

static void configure(void) {
    gpu_count = (unsigned int)env_double("FAKE_NVML_GPUS", 2);
    if (gpu_count > MAX_GPUS) gpu_count = MAX_GPUS;
    update_s = env_double("FAKE_NVML_UPDATE_S", 0.1);
    update_offset_s = env_double("FAKE_NVML_UPDATE_OFFSET_S", 0.037);
    counter_supported = (int)env_double("FAKE_NVML_COUNTER", 1);
    lost_after_s = env_double("FAKE_NVML_LOST_AFTER_S", -1.0);
    lost_gpu = (int)env_double("FAKE_NVML_LOST_GPU", -1);
    reset_after_s = env_double("FAKE_NVML_RESET_AFTER_S", -1.0);
    arch = (unsigned int)env_double("FAKE_NVML_ARCH", 7);
    mem_mb = (unsigned int)env_double("FAKE_NVML_MEM_MB", 81920);
    tdp_w = (unsigned int)env_double("FAKE_NVML_TDP_W", 400);
    noise_w = env_double("FAKE_NVML_NOISE_W", 0.0);
    const char *clock_mode = getenv("FAKE_NVML_CLOCK");
    clock_manual = (clock_mode && strcmp(clock_mode, "manual") == 0);
    tick_ns = (int64_t)llround(env_double("FAKE_NVML_CLOCK_TICK_S", 0.00001) * 1e9);
    if (tick_ns < 0) tick_ns = 0;
    const char *cc = getenv("FAKE_NVML_CC");
    if (cc && *cc) sscanf(cc, "%d.%d", &cc_major, &cc_minor);
    else { cc_major = 8; cc_minor = 0; }
    const char *name = getenv("FAKE_NVML_NAME");
    snprintf(name_template, sizeof name_template, "%s", (name && *name) ? name : "NVIDIA A800-SXM4-80GB");
    for (unsigned int i = 0; i < gpu_count; i++) {
        fake_device *d = &devices[i];
        d->index = i;
        snprintf(d->name, sizeof d->name, "%s", name_template);
        snprintf(d->uuid, sizeof d->uuid, "GPU-fa4e0000-0000-4000-8000-%012u", i);
        d->base_w = env_list("FAKE_NVML_BASE_W", i, 250.0);
        d->amp_w = env_list("FAKE_NVML_AMP_W", i, 60.0);
        d->period_s = env_list("FAKE_NVML_PERIOD_S", i, 1.7);
        d->phase = env_list("FAKE_NVML_PHASE", i, 0.5 * i);
    }
}

static double power_at(const fake_device *d, double t) {
    return d->base_w + d->amp_w * sin(2.0 * M_PI * t / d->period_s + d->phase);
}

static double energy_at(const fake_device *d, double t) {
    double w = 2.0 * M_PI / d->period_s;
    return d->base_w * t - d->amp_w / w * (cos(w * t + d->phase) - cos(d->phase));
}

static fake_device *check(void *handle, nvmlReturn_t *err) {
    if (!initialised) { *err = NVML_ERROR_UNINITIALIZED; return NULL; }
    fake_device *d = (fake_device *)handle;
    if (d < devices || d >= devices + gpu_count) { *err = NVML_ERROR_INVALID_ARGUMENT; return NULL; }
    if (lost_after_s >= 0 && now_s() - init_time >= lost_after_s &&
        (lost_gpu < 0 || (unsigned int)lost_gpu == d->index)) {
        *err = NVML_ERROR_GPU_IS_LOST;
        return NULL;
    }
    *err = NVML_SUCCESS;
    return d;
}

#define DEVICE_OR_RETURN(handle)          \
    nvmlReturn_t err_;                    \
    fake_device *d = check(handle, &err_); \
    if (!d) return err_;

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    /* Inert unless enabled, so a process that loaded the fake behaves like one without a driver
       once the test that configured it is over. */
    const char *enabled = getenv("FAKE_NVML_ENABLE");
    if (!enabled || strcmp(enabled, "1") != 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    configure();
    init_time = now_s();
    initialised = 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    initialised = 0;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t copy_string(char *out, unsigned int length, const char *value) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, value);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    return copy_string(version, length, "999.99.fake");
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    return copy_string(version, length, "99.999.99.fake");
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = 12080;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = gpu_count;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, void **device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
    if (!initialised) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < gpu_count; i++) {
        if (strcmp(devices[i].uuid, uuid) == 0) { *device = &devices[i]; return NVML_SUCCESS; }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(void *handle, unsigned int *index) {
    DEVICE_OR_RETURN(handle);
    *index = d->index;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetName(void *handle, char *name, unsigned int length) {
    DEVICE_OR_RETURN(handle);
    return copy_string(name, length, d->name);
}
nvmlReturn_t nvmlDeviceGetUUID(void *handle, char *uuid, unsigned int length) {
    DEVICE_OR_RETURN(handle);
    return copy_string(uuid, length, d->uuid);
}
nvmlReturn_t nvmlDeviceGetArchitecture(void *handle, unsigned int *out) {
    DEVICE_OR_RETURN(handle);
    *out = arch;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(void *handle, int *major, int *minor) {
    DEVICE_OR_RETURN(handle);
    *major = cc_major;
    *minor = cc_minor;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(void *handle, nvmlMemory_t *memory) {
    DEVICE_OR_RETURN(handle);
    memory->total = (unsigned long long)mem_mb << 20;
    memory->used = 1ULL << 30;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *handle, nvmlMemory_v2_t *memory) {
    DEVICE_OR_RETURN(handle);
    memory->total = (unsigned long long)mem_mb << 20;
    memory->reserved = 0;
    memory->used = 1ULL << 30;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void *handle, unsigned int *limit_mw) {
    DEVICE_OR_RETURN(handle);
    *limit_mw = tdp_w * 1000;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(void *handle, unsigned int *limit_mw) {
    return nvmlDeviceGetEnforcedPowerLimit(handle, limit_mw);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(void *handle, unsigned long long *energy_mj) {
    DEVICE_OR_RETURN(handle);
    if (!counter_supported) return NVML_ERROR_NOT_SUPPORTED;
    double t = reading_s();
    double u = update_offset_s + floor((t - update_offset_s) / update_s) * update_s;
    double joules = energy_at(d, u);
    if (reset_after_s >= 0) {
        double reset_t = init_time + reset_after_s;
        if (u >= reset_t) joules -= energy_at(d, reset_t);
    }
    *energy_mj = (unsigned long long)floor(joules * 1000.0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(void *handle, unsigned int *power_mw) {
    DEVICE_OR_RETURN(handle);
    double t = reading_s();
    *power_mw = (unsigned int)((energy_at(d, t) - energy_at(d, t - 1.0)) * 1000.0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFieldValues(void *handle, int count, nvmlFieldValue_t *values) {
    DEVICE_OR_RETURN(handle);
    if (count < 0 || (count > 0 && !values)) return NVML_ERROR_INVALID_ARGUMENT;
    double t = reading_s();
    for (int i = 0; i < count; i++) {
        values[i].timestamp = (int64_t)(t * 1e6);
        values[i].latencyUsec = 0;
        if (values[i].fieldId == FI_DEV_POWER_INSTANT) {
            values[i].valueType = 1; /* unsigned int */
            double reading = power_at(d, t) + (noise_w > 0 ? noise_w * noise_unit() : 0.0);
            values[i].value.uiVal = (unsigned int)((reading > 0 ? reading : 0.0) * 1000.0);
            values[i].nvmlReturn = NVML_SUCCESS;
        } else {
            values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}
