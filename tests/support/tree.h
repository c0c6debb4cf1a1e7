/* Files and links under a test's scratch directory (tests/io's HF cache
 * trees): rel is relative to root; missing directories are made. 0, or a
 * negative HR_E* code. */
#ifndef HR_TESTS_TREE_H
#define HR_TESTS_TREE_H

int hr_test_put(const char *root, const char *rel, const char *text);
int hr_test_link(const char *root, const char *rel, const char *target);

#endif
