/* A small deterministic workload for the seccomp record round trip: file,
 * network and process work, one line per step, "ok" or the errno. It exits
 * with the number of failed steps. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int failed;

static int step(const char *name, int rc)
{
	if (rc < 0) {
		printf("%s: errno %d (%s)\n", name, errno, strerror(errno));
		failed++;
		return -1;
	}
	printf("%s: ok\n", name);
	return 0;
}

static void file_work(const char *dir)
{
	char path[4096], path2[4096], buf[16] = {0};
	struct stat st;
	snprintf(path, sizeof(path), "%s/a.txt", dir);
	snprintf(path2, sizeof(path2), "%s/b.txt", dir);
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
	if (step("open-create", fd) < 0)
		return;
	step("write", write(fd, "hello", 5) == 5 ? 0 : -1);
	close(fd);
	step("stat", stat(path, &st));
	printf("size: %lld\n", (long long)st.st_size);
	step("rename", rename(path, path2));
	fd = open(path2, O_RDONLY);
	if (step("open-read", fd) == 0) {
		step("read", read(fd, buf, sizeof(buf) - 1) == 5 ? 0 : -1);
		printf("content: %s\n", buf);
		close(fd);
	}
	step("unlink", unlink(path2));
	snprintf(path, sizeof(path), "%s/sub", dir);
	step("mkdir", mkdir(path, 0700));
	step("rmdir", rmdir(path));
}

static void network_work(void)
{
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(addr);
	char buf[8] = {0};
	int srv = socket(AF_INET, SOCK_STREAM, 0);
	if (step("socket", srv) < 0)
		return;
	if (step("bind", bind(srv, (struct sockaddr *)&addr, sizeof(addr))) < 0 ||
	    step("listen", listen(srv, 1)) < 0 ||
	    step("getsockname", getsockname(srv, (struct sockaddr *)&addr, &len)) < 0)
		return;
	int cli = socket(AF_INET, SOCK_STREAM, 0);
	if (step("socket-client", cli) < 0 ||
	    step("connect", connect(cli, (struct sockaddr *)&addr, sizeof(addr))) < 0)
		return;
	int conn = accept(srv, NULL, NULL);
	if (step("accept", conn) < 0)
		return;
	step("send", send(cli, "ping", 4, 0) == 4 ? 0 : -1);
	step("recv", recv(conn, buf, sizeof(buf) - 1, 0) == 4 ? 0 : -1);
	printf("received: %s\n", buf);
	close(conn);
	close(cli);
	close(srv);
}

static void process_work(void)
{
	int p[2];
	char buf[8] = {0};
	int status;
	if (step("pipe", pipe(p)) < 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		(void)!write(p[1], "child", 5);
		_exit(7);
	}
	if (step("fork", pid) < 0)
		return;
	close(p[1]);
	step("read-pipe", read(p[0], buf, sizeof(buf) - 1) == 5 ? 0 : -1);
	printf("from child: %s\n", buf);
	step("waitpid", waitpid(pid, &status, 0));
	printf("child exit: %d\n", WEXITSTATUS(status));
	close(p[0]);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 100;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	file_work(argv[1]);
	network_work();
	process_work();
	return failed;
}
