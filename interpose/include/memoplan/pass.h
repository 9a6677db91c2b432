/* Pass boundaries for programs run under libmemoplan_preload.so.
 *
 * Call memoplan_pass_begin() before and memoplan_pass_end() after each inference pass on the
 * thread that runs it. The symbols are weak: a program calls them through
 *     if (memoplan_pass_begin) memoplan_pass_begin();
 * and runs unchanged without the shim. Programs that do not call them get automatic detection
 * (the repeating allocation sequence of each thread). C and C++. */
#ifndef MEMOPLAN_PASS_H_
#define MEMOPLAN_PASS_H_

#ifdef __cplusplus
extern "C" {
#endif

void memoplan_pass_begin(void) __attribute__((weak));
void memoplan_pass_end(void) __attribute__((weak));

#ifdef __cplusplus
}
#endif

#endif /* MEMOPLAN_PASS_H_ */
