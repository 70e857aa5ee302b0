// The C program of consumer.c, compiled as C++.
#include "consumer.c"
