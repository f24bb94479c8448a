#include <cstdio>
__global__ void k(float *x) { x[threadIdx.x] = 1.0f; }
int main() {
    float *d; cudaError_t e = cudaMalloc(&d, 1024);
    printf("cudaMalloc: %s\n", cudaGetErrorString(e));
    k<<<1, 32>>>(d);
    e = cudaGetLastError();
    printf("CUDA error: %s (%s)\n", cudaGetErrorString(e), cudaGetErrorName(e));
    return e == cudaSuccess ? 0 : 1;
}
