/* bt_lib.c - the shared library of test_backtrace.c, built twice (bt_lib_a.so, bt_lib_b.so)
 * from this source: the same code at the same offsets, but frames of BT_PAD and 2 x BT_PAD
 * bytes, so that a rule cached for a return address of one is wrong for the other. */
#ifndef BT_PAD
#define BT_PAD 200
#endif
typedef int (*bt_leaf_fn)(void *);
static _Thread_local volatile int bt_lib_sink;
__attribute__((noinline)) int bt_lib_chain(int depth, bt_leaf_fn leaf, void *arg) {
  volatile char pad[BT_PAD];
  pad[0] = (char)depth;
  int r = depth == 0 ? leaf(arg) : bt_lib_chain(depth - 1, leaf, arg);
  bt_lib_sink += pad[0] + r;
  return r;
}
