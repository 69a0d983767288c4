# expect.cmake: runs one command and checks its exit status, its output and which files it left behind.
# Variables (lists are separated by '|'):
#   PROGRAM, ARGS          the command
#   EXPECT_RC              required exit status
#   EXPECT_REGEX           must match stdout + stderr (optional)
#   EXPECT_NO_REGEX        must not match stdout + stderr (optional)
#   OUTPUTS                files removed before the run; they must exist after a successful run
#                          and must not exist after a failed one
#   BACKWARD_PENDING_OK    1: while the library's flashcl_backward is still a stub, exit 1 with the
#                          "unsupported configuration" report of the backward call is accepted in
#                          place of EXPECT_RC 0 (and then no gradient file may exist); a forward
#                          failure or any other outcome still fails, and the forward's
#                          --check must have passed
string(REPLACE "|" ";" args "${ARGS}")
string(REPLACE "|" ";" outputs "${OUTPUTS}")
foreach(file IN LISTS outputs)
  file(REMOVE "${file}")
endforeach()

execute_process(COMMAND "${PROGRAM}" ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("$ ${PROGRAM} ${args}\n--- stdout:\n${out}--- stderr:\n${err}--- exit status: ${rc}")

set(expected_rc "${EXPECT_RC}")
if(BACKWARD_PENDING_OK AND rc EQUAL 1 AND err MATCHES "flashcl run: backward: unsupported configuration")
  message("NOTE: flashcl_backward is not implemented yet; checked that it is reported cleanly instead")
  if(NOT out MATCHES "check: forward passed")
    message(FATAL_ERROR "the forward's --check did not pass")
  endif()
  set(expected_rc 1)
  list(FILTER outputs INCLUDE REGEX "/d[qkv]\\.npy$")
endif()
if(NOT rc STREQUAL expected_rc)
  message(FATAL_ERROR "exit status ${rc}, expected ${expected_rc}")
endif()
if(DEFINED EXPECT_REGEX AND NOT "${out}${err}" MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "output does not match '${EXPECT_REGEX}'")
endif()
if(DEFINED EXPECT_NO_REGEX AND "${out}${err}" MATCHES "${EXPECT_NO_REGEX}")
  message(FATAL_ERROR "output matches '${EXPECT_NO_REGEX}', which it must not")
endif()
foreach(file IN LISTS outputs)
  if(rc EQUAL 0 AND NOT EXISTS "${file}")
    message(FATAL_ERROR "${file} was not written")
  elseif(NOT rc EQUAL 0 AND EXISTS "${file}")
    message(FATAL_ERROR "${file} was written although the command failed")
  endif()
endforeach()
