// membw: GPU memory bandwidth, the bound a dense model's decode is compared against.
//
// The seed measured 81.4 GB/s of GPU read bandwidth on a Jetson Orin Nano Super (EMC 102 GB/s
// nominal) and reported dense decode efficiency as tg / (bandwidth / GPU weight bytes). This
// tool measures read, write and copy bandwidth over a buffer much larger than the GPU caches,
// timed with CUDA events on the device, and prints one JSON line.
//
// Build on the board:  nvcc -O3 -arch=native -o bin/membw membw.cu   (Orin: -arch=sm_87)
// Run:                 bin/membw [--bytes N] [--reps R]
// Exit codes: 0 ok, 2 bad arguments or no usable CUDA device (the message says which).

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                         \
  do {                                                                                      \
    cudaError_t err_ = (call);                                                              \
    if (err_ != cudaSuccess) {                                                              \
      fprintf(stderr, "membw: %s: %s\n", #call, cudaGetErrorString(err_));                \
      exit(2);                                                                              \
    }                                                                                       \
  } while (0)

// Each thread reads float4s in a grid-stride loop; the sum is written so the loads cannot be elided.
__global__ void read_kernel(const float4 *__restrict__ src, size_t n, float *sink) {
  float acc = 0.0f;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float4 v = src[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 1234.5678f) *sink = acc;  // practically never true; keeps the reads alive
}

__global__ void write_kernel(float4 *__restrict__ dst, size_t n, float value) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = make_float4(value, value, value, value);
}

__global__ void copy_kernel(const float4 *__restrict__ src, float4 *__restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

static double gbps(double bytes, float ms) { return ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0.0; }

int main(int argc, char **argv) {
  size_t bytes = (size_t)512 << 20;  // 512 MiB per buffer: far beyond L2 on every Jetson
  int reps = 20;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--bytes") && i + 1 < argc) {
      bytes = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: membw [--bytes N] [--reps R]\n");
      return 2;
    }
  }
  bytes -= bytes % sizeof(float4);
  if (bytes == 0 || reps < 1) {
    fprintf(stderr, "membw: --bytes must be >= 16 and --reps >= 1\n");
    return 2;
  }
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    fprintf(stderr, "membw: no usable CUDA device (%s)\n",
            err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
    return 2;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  size_t n = bytes / sizeof(float4);
  float4 *a, *b;
  float *sink;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMalloc(&sink, sizeof(float)));
  int threads = 256, blocks = prop.multiProcessorCount * 8;
  write_kernel<<<blocks, threads>>>(a, n, 1.0f);  // also the warm-up: pages touched, clocks up
  copy_kernel<<<blocks, threads>>>(a, b, n);
  CHECK(cudaDeviceSynchronize());

  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  float ms_read = 0, ms_write = 0, ms_copy = 0;
  CHECK(cudaEventRecord(start));
  for (int r = 0; r < reps; r++) read_kernel<<<blocks, threads>>>(a, n, sink);
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  CHECK(cudaEventElapsedTime(&ms_read, start, stop));
  CHECK(cudaEventRecord(start));
  for (int r = 0; r < reps; r++) write_kernel<<<blocks, threads>>>(b, n, (float)r);
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  CHECK(cudaEventElapsedTime(&ms_write, start, stop));
  CHECK(cudaEventRecord(start));
  for (int r = 0; r < reps; r++) copy_kernel<<<blocks, threads>>>(a, b, n);
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  CHECK(cudaEventElapsedTime(&ms_copy, start, stop));
  CHECK(cudaGetLastError());

  double total = (double)bytes * reps;
  printf("{\"tool\": \"membw\", \"device\": \"%s\", \"integrated\": %s, \"buffer_bytes\": %zu, \"reps\": %d, "
         "\"read_gbps\": %.2f, \"write_gbps\": %.2f, \"copy_gbps\": %.2f}\n",
         prop.name, prop.integrated ? "true" : "false", bytes, reps, gbps(total, ms_read), gbps(total, ms_write),
         gbps(2.0 * total, ms_copy));  // a copy moves every byte twice (read + write)
  cudaFree(a);
  cudaFree(b);
  cudaFree(sink);
  return 0;
}
