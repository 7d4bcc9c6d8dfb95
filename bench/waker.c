/* One of wakefloor.py's N processes, compiled (--native): at real-time priority where it
   may and with 1 ns of timer slack, sleep until each of argv[3] instants, the first at
   argv[1] ns (CLOCK_REALTIME) and each argv[2] ns after the one before; then write how late
   it woke at each, in ns, as one JSON list on the descriptor argv[4]. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc != 5)
        return 2;
    long long first = atoll(argv[1]), gap = atoll(argv[2]);
    int count = atoi(argv[3]);
    long long *late = calloc(count, sizeof *late);
    struct sched_param param = {.sched_priority = 1};
    sched_setscheduler(0, SCHED_FIFO, &param);
    prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
    for (int k = 0; k < count; k++) {
        long long at = first + k * gap;
        struct timespec when = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000}, now;
        while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &when, NULL) != 0)
            ;
        clock_gettime(CLOCK_REALTIME, &now);
        late[k] = now.tv_sec * 1000000000LL + now.tv_nsec - at;
    }
    FILE *out = fdopen(atoi(argv[4]), "w");
    fputc('[', out);
    for (int k = 0; k < count; k++)
        fprintf(out, k ? ",%lld" : "%lld", late[k]);
    fputs("]\n", out);
    return fclose(out) != 0;
}
