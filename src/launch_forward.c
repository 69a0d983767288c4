/* launch_forward.c: enqueues a forward plan (portable or tensor-core kernel, after a block mask's tile summary). */
#include "kernel_args.h"
#include "launch.h"

flashcl_status flashcl_launch_forward(flashcl_context *ctx, const flashcl_exec_plan *plan,
                                      const flashcl_attention_desc *desc, const flashcl_features *features,
                                      const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                      const flashcl_tensor *o, const flashcl_tensor *lse, cl_uint num_events,
                                      const cl_event *wait_list, cl_event *event) {
    cl_kernel kernel;
    flashcl_status status = flashcl_get_program_kernel(ctx, plan->prelude, plan->program, plan->kernel_names[0], plan->options,
                                                       &kernel);
    if (status != FLASHCL_SUCCESS) return status;
    /* The block mask's tile summary runs first; the attention kernel waits for it. */
    flashcl_tile_mask tiles;
    cl_event tiles_done = NULL;
    if ((status = flashcl_tile_mask_build(ctx, desc, features, plan->mask_tiles[0][0], plan->mask_tiles[0][1],
                                          num_events, wait_list, &tiles, &tiles_done)))
        return status;
    if (tiles_done) {
        num_events = 1;
        wait_list = &tiles_done;
    }
    flashcl_kernel_args args = {kernel, 0, CL_SUCCESS};
    /* The tensor-core kernel takes no features (the dispatcher gives it
     * none), so its causal flag is the desc's. */
    flashcl_arg_forward_dense(&args, desc, q, k, v, o, lse, features->causal);
    if (plan->portable_args) flashcl_arg_features(&args, features, &tiles);
    if (args.error != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, args.error, "clSetKernelArg (forward)");
        goto done;
    }
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernel, plan->work_dims[0], NULL, plan->global[0],
                                        plan->local[0], num_events, wait_list, event);
    if (err != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (forward)");
        goto done;
    }
    flashcl_record_stats(ctx, plan);
done:
    /* Enqueued kernels keep the summary alive until they finish. */
    if (tiles_done) clReleaseEvent(tiles_done);
    flashcl_tile_mask_release(&tiles);
    return status;
}
