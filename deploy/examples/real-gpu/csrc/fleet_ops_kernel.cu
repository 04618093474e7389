// The kernels of fleet_ops (see fleet_ops.cpp): one block per row, the sum of squares reduced in
// float. They run on the current stream, so the server can capture them in a CUDA graph.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

namespace {

constexpr int kThreads = 256;

// at::Half and at::BFloat16 convert to and from float on the device (torch builds with
// __CUDA_NO_HALF_OPERATORS__, so their own conversions are the ones to use).
template <typename T>
__device__ __forceinline__ float to_float(T v) {
  return static_cast<float>(v);
}

__device__ float block_sum(float v) {
  __shared__ float warp_sums[kThreads / 32];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
  __syncthreads();
  return total;
}

// residual == nullptr: y = rmsnorm(x). Else residual += x, y = rmsnorm(residual).
template <typename T>
__global__ void add_rmsnorm_kernel(const T* __restrict__ x, T* __restrict__ residual,
                                   const T* __restrict__ weight, T* __restrict__ y, int hidden,
                                   float eps) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * hidden;
  T* rr = residual == nullptr ? nullptr : residual + row * hidden;
  T* yr = y + row * hidden;
  float sum = 0.f;
  for (int i = threadIdx.x; i < hidden; i += kThreads) {
    float v = to_float(xr[i]);
    if (rr != nullptr) {
      v += to_float(rr[i]);
      rr[i] = static_cast<T>(v);
    }
    sum += v * v;
  }
  const float inv = rsqrtf(block_sum(sum) / hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += kThreads) {
    const float v = rr != nullptr ? to_float(rr[i]) : to_float(xr[i]);
    yr[i] = static_cast<T>(v * inv * to_float(weight[i]));
  }
}

torch::Tensor launch(const torch::Tensor& x, torch::Tensor* residual, const torch::Tensor& weight,
                     double eps) {
  const c10::cuda::CUDAGuard guard(x.device());
  auto y = torch::empty_like(x);
  const int hidden = static_cast<int>(x.size(-1));
  const int64_t rows = x.numel() / hidden;
  if (rows == 0) return y;
  auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(),
                                  "fleet_add_rmsnorm", [&] {
                                    add_rmsnorm_kernel<scalar_t><<<rows, kThreads, 0, stream>>>(
                                        x.data_ptr<scalar_t>(),
                                        residual ? residual->data_ptr<scalar_t>() : nullptr,
                                        weight.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), hidden,
                                        static_cast<float>(eps));
                                  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

}  // namespace

torch::Tensor rmsnorm_cuda(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return launch(x, nullptr, weight, eps);
}

torch::Tensor add_rmsnorm_cuda(const torch::Tensor& x, torch::Tensor& residual,
                               const torch::Tensor& weight, double eps) {
  return launch(x, &residual, weight, eps);
}
