/* test_support.h: everything the device suites share (forward, backward, features, standard); include this one header. */
#ifndef FLASHCL_TEST_SUPPORT_H
#define FLASHCL_TEST_SUPPORT_H

#include "attention_reference.h" /* the double- and float-precision CPU references */
#include "support_case.h"        /* ts_case: one dense case type */
#include "support_compare.h"     /* ts_compare, ts_assert_rule: the tolerance rule */
#include "support_context.h"     /* ts_context, ts_context_own, ts_context_wgmma, ts_device_is_sm90, ts_explain, ts_last_stats, TS_CASE_TIMEOUT */
#include "support_forward.h"     /* ts_problem: a forward problem, its run and check */
#include "support_random.h"      /* ts_rng: the one seeded input generator */
#include "support_tensor.h"      /* poisoned buffers, canaries, strided tensors */

#endif
