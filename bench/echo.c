/* One of stepfloor.py's N processes, compiled (--native): answer each byte on the socket
   whose descriptor is argv[1] with a byte, until the sender hangs up. */
#include <stdlib.h>
#include <sys/socket.h>

int main(int argc, char **argv) {
    int fd = argc > 1 ? atoi(argv[1]) : 0;
    char byte;
    while (recv(fd, &byte, 1, 0) == 1)
        if (send(fd, "a", 1, 0) != 1)
            return 1;
    return 0;
}
