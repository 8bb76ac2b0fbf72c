/* cmd_launch.c: `redlm launch`, several worker instances splitting a host's
 * GPUs (worker/launch/launch.h says how).  scripts/launch-instances is the
 * same command for scripts and compose files. */
#include <stdio.h>

#include "worker/commands.h"
#include "worker/launch/launch.h"

int cmd_launch(int argc, char **argv) {
    rlLaunch l;
    int rc = launch_parse(&l, argc, argv);
    if (rc >= 0) return rc;
    rlError err = {0};
    if (launch_devices(&l, &err)) {
        fprintf(stderr, "redlm launch: %s\n", err.msg);
        return err.code;
    }
    if (l.dry) {
        launch_print(&l);
        return 0;
    }
    launch_spawn(&l);
    return launch_supervise(&l);
}
