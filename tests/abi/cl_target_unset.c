/* cl_target_unset.c: an application that sets no CL_TARGET_OPENCL_VERSION and includes flashcl.h first gets
 * the Khronos headers' default (3.0), not a 1.2 that flashcl.h chose for it: OpenCL 2.0 calls are declared.
 * Built with -Werror (the headers' #pragma message about the default is a note, not a warning). */
#include <flashcl.h>

int main(void) {
    cl_int err = CL_SUCCESS;
    cl_command_queue queue = clCreateCommandQueueWithProperties(NULL, NULL, NULL, &err);
    if (queue) clReleaseCommandQueue(queue);
    return err != CL_SUCCESS ? 0 : 1;
}
