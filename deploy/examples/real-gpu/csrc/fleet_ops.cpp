// fleet_ops: the small CUDA extension that deploy/examples/real-gpu/server.py JIT-compiles at
// start with torch.utils.cpp_extension.load (ninja + nvcc, the pipeline flashinfer uses).
//
// rmsnorm(x, weight, eps) -> y        y = x / sqrt(mean(x^2) + eps) * weight, row by row
// add_rmsnorm(x, residual, weight, eps) -> y   residual += x (in place), y = rmsnorm(residual)
// driver_version() -> int             the CUDA driver's version through the driver API
//                                     (cuDriverGetVersion, needs -lcuda), -1 when the
//                                     extension was built without it (no FLEET_USE_DRIVER_API)
#include <torch/extension.h>

#ifdef FLEET_USE_DRIVER_API
#include <cuda.h>
#endif

torch::Tensor rmsnorm_cuda(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor add_rmsnorm_cuda(const torch::Tensor& x, torch::Tensor& residual,
                               const torch::Tensor& weight, double eps);

namespace {

void check_inputs(const torch::Tensor& x, const torch::Tensor& weight) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "fleet_ops: tensors must be on the GPU");
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous(), "fleet_ops: tensors must be contiguous");
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && x.size(-1) == weight.size(0),
              "fleet_ops: weight must be [hidden] with hidden the last dim of x");
  TORCH_CHECK(x.scalar_type() == weight.scalar_type(), "fleet_ops: x and weight differ in dtype");
}

torch::Tensor rmsnorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  check_inputs(x, weight);
  return rmsnorm_cuda(x, weight, eps);
}

torch::Tensor add_rmsnorm(const torch::Tensor& x, torch::Tensor residual, const torch::Tensor& weight,
                          double eps) {
  check_inputs(x, weight);
  check_inputs(residual, weight);
  TORCH_CHECK(x.sizes() == residual.sizes(), "fleet_ops: x and residual differ in shape");
  return add_rmsnorm_cuda(x, residual, weight, eps);
}

int64_t driver_version() {
#ifdef FLEET_USE_DRIVER_API
  int version = 0;
  CUresult r = cuDriverGetVersion(&version);
  TORCH_CHECK(r == CUDA_SUCCESS, "fleet_ops: cuDriverGetVersion failed with ", static_cast<int>(r));
  return version;
#else
  return -1;
#endif
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "gpu-fleet real-GPU example: fused RMSNorm kernels";
  m.def("rmsnorm", &rmsnorm, "RMSNorm over the last dim", py::arg("x"), py::arg("weight"),
        py::arg("eps") = 1e-6);
  m.def("add_rmsnorm", &add_rmsnorm, "residual += x; RMSNorm(residual)", py::arg("x"),
        py::arg("residual"), py::arg("weight"), py::arg("eps") = 1e-6);
  m.def("driver_version", &driver_version, "the CUDA driver version (-1: not built with -lcuda)");
}
