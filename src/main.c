/* main.c — the tfm binary's entry point; the commands start at cli.c. */
#include "cli.h"

int main(int argc, char **argv) { return cli_main(argc, argv); }
