/* libFuzzer entry point for the results target (see fuzz_targets.c); built and run by `make fuzz`. */
#include "fuzz_targets.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_results(data, size); }
