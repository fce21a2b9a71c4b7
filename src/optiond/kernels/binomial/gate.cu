// Stream gate for device timing (benchmarks and `timing` dicts only).
//
// A CUDA-event window "record start; launch kernels; record stop" also holds the host's time to
// submit the launches: the start event completes as soon as the idle GPU reaches it, and the GPU
// then waits for the first kernel. The gate holds the stream instead: one thread spins on a flag
// in page-locked host memory, the start event, the kernels and the stop event are queued behind
// it, and the host sets the flag once everything is queued, so the window holds the GPU's work
// and its launch latency only. Same method as NVBench's blocking_kernel (NVIDIA/nvbench,
// nvbench/blocking_kernel.cu). The spin gives up after `timeout_ns` (a host that never releases
// the gate cannot hang the stream) and then sets *timed_out, so a caller can reject that sample.

extern "C" __global__ void crr_gate(const volatile int* __restrict__ flag, unsigned long long timeout_ns,
                                    int* __restrict__ timed_out) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (*flag == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > timeout_ns) {
            *timed_out = 1;
            return;
        }
    }
}
