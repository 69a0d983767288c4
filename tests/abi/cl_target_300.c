/* cl_target_300.c: an application that wants OpenCL 3.0 and includes flashcl.h first still gets it. Built
 * with -Werror (tests/abi/CMakeLists.txt): were flashcl.h to choose CL_TARGET_OPENCL_VERSION itself, this
 * define would be a redefinition and clCreateCommandQueueWithProperties an implicit declaration. */
#define CL_TARGET_OPENCL_VERSION 300
#include <flashcl.h>

#include <CL/cl.h>

int main(void) {
    /* No context: the loader answers CL_INVALID_CONTEXT (or CL_INVALID_PLATFORM); it is the declaration that is
     * under test. */
    const cl_queue_properties properties[] = {CL_QUEUE_PROPERTIES, 0, 0};
    cl_int err = CL_SUCCESS;
    cl_command_queue queue = clCreateCommandQueueWithProperties(NULL, NULL, properties, &err);
    if (queue) clReleaseCommandQueue(queue);
    return flashcl_version_number() == FLASHCL_VERSION_NUMBER && err != CL_SUCCESS ? 0 : 1;
}
