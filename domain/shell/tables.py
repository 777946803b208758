"""The command tables the self-update policy judges by (domain/self_update_policy.py).

Which names are privilege, network, deploy, credential and package tools, which of
their options take values or change where they reach, which git subcommands talk to
remotes or write files, and which wrappers the policy unwraps. Pure data.
"""

from __future__ import annotations

import re

from domain.shell.allowlist import (
    KNOWN_COMMANDS,
    PROCESS_CONTROL_TOOLS,
    UNANALYSED_WRAPPERS,
    words,
)

KEYWORDS = words("{ } ! if then else elif fi do done while until coproc esac")
PRIVILEGE = words(
    "sudo su doas pkexec runuser sudoedit dzdo chroot nsenter unshare setpriv capsh sg newgrp"
    " bwrap firejail proot fakeroot"
)
SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "yash", "rbash"}
)
PYTHON = re.compile(r"^(?:python|pypy)[0-9.]*$")
UNRESTRICTED = {
    "eval": "`eval` runs a string as code",
    "tmux": "`tmux` runs commands in another shell",
    "screen": "`screen` runs commands in another shell",
    "osascript": "`osascript` runs scripts outside the shell",
    "powershell": "PowerShell is not parsed by this policy",
    "pwsh": "PowerShell is not parsed by this policy",
}
CREDENTIAL_TOOLS = words(
    "ssh-add ssh-agent ssh-keygen gpg gpg2 gpg-agent gpgconf security secret-tool pass gopass"
    " op bw vault keyring aws-vault"
)
ALWAYS_NETWORK = words(
    "ssh scp sftp mosh ssh-copy-id ssh-keyscan sshpass autossh sshfs ftp tftp lftp ncftp"
    " smbclient rclone s3cmd socat aws gcloud gsutil az doctl oci ibmcloud glab hub tea mail"
    " sendmail mutt"
)
DEPLOY_TOOLS = words(
    "kubectl oc vercel netlify heroku fly flyctl firebase wrangler serverless sls eb cdk sam"
    " amplify railway ansible ansible-playbook systemctl launchctl reboot shutdown halt"
    " poweroff telinit crontab at batch systemd-run"
)
DEPLOY_VERBS = {
    "helm": words("install upgrade uninstall delete rollback push"),
    "terraform": words("apply destroy import"),
    "tofu": words("apply destroy import"),
    "pulumi": words("up update destroy import"),
}
FETCHERS = words("curl wget wget2 http https xh xhs curlie aria2c lynx links w3m elinks")
CURL_VALUES = words(
    "-o -H -d -X -u -A -e -b -c -T -F -m -w -r -C -E -z -Y -y -P -t -Q -U --output --header"
    " --data --data-raw --data-binary --data-urlencode --data-ascii --json --request --user"
    " --user-agent --referer --cookie --cookie-jar --upload-file --form --form-string"
    " --max-time --connect-timeout --write-out --range --continue-at --cert --key --cacert"
    " --retry --retry-delay --retry-max-time --time-cond --limit-rate --output-dir"
    " --proxy-user --oauth2-bearer --max-filesize --interface"
)
WGET_VALUES = words(
    "-O -o -a -P -t -T -U -w -Q -l -A -R -D -X -I --output-document --output-file"
    " --append-output --directory-prefix --tries --timeout --user-agent --wait --quota --level"
    " --header --post-data --post-file --body-data --body-file --method --user --password"
)
HTTPIE_VALUES = words(
    "-a --auth -A --auth-type --session --session-read-only -o --output --verify --cert"
    " --cert-key --timeout --max-redirects"
)
FETCH_VALUES = {
    "curl": CURL_VALUES,
    "curlie": CURL_VALUES,
    "wget": WGET_VALUES,
    "wget2": WGET_VALUES,
    "http": HTTPIE_VALUES,
    "https": HTTPIE_VALUES,
    "xh": HTTPIE_VALUES,
    "xhs": HTTPIE_VALUES,
}
# Options that send a fetch somewhere the command line does not show.
FETCH_REFUSED = words(
    "--proxy --preproxy --socks4 --socks4a --socks5 --socks5-hostname --connect-to --resolve"
    " --config --doh-url --input-file --execute --proxy1.0 --all-proxy"
)
FETCH_REFUSED_SHORT = {
    "curl": words("-x -K"),
    "curlie": words("-x -K"),
    "wget": words("-i -e"),
    "wget2": words("-i -e"),
    "aria2c": words("-i"),
}
SOCKET_TOOLS = words(
    "nc ncat netcat telnet ping ping6 traceroute tracepath mtr dig nslookup host whois nmap"
)
SOCKET_VALUES = frozenset(
    {"-p", "-s", "-w", "-i", "-q", "-X", "-T", "-O", "-I", "-W", "-c", "-t", "-m", "-M"}
)
SOCKET_EXEC = frozenset({"-e", "--exec", "--sh-exec", "--lua-exec"})
PACKAGE_MANAGERS = words(
    "pip pip3 uv uvx pipx poetry pdm hatch flit rye pipenv conda mamba micromamba twine npm"
    " npx pnpm yarn bun bunx deno cargo gem bundle go composer dotnet mvn gradle gradlew make"
    " just"
)
PUBLISH_VERBS = {
    "npm": words(
        "publish unpublish deprecate dist-tag owner access adduser login token team org hook"
    ),
    "pnpm": words("publish"),
    "yarn": words("publish"),
    "bun": words("publish"),
    "twine": words("upload register"),
    "poetry": words("publish"),
    "pdm": words("publish"),
    "hatch": words("publish"),
    "flit": words("publish"),
    "uv": words("publish"),
    "rye": words("publish"),
    "cargo": words("publish yank owner login"),
    "gem": words("push yank owner signin"),
    "mvn": words("deploy"),
    "deno": words("publish deploy"),
}
PUBLISH_SUBVERBS = {
    ("yarn", "npm"): frozenset({"publish", "login", "tag"}),
    ("dotnet", "nuget"): frozenset({"push", "delete"}),
}
RUN_VERBS = frozenset(
    {
        ("uv", "run"),
        ("poetry", "run"),
        ("pipenv", "run"),
        ("pdm", "run"),
        ("hatch", "run"),
        ("rye", "run"),
        ("conda", "run"),
        ("mamba", "run"),
        ("micromamba", "run"),
        ("bundle", "exec"),
        ("npm", "exec"),
        ("npm", "x"),
        ("pnpm", "exec"),
        ("pnpm", "dlx"),
        ("yarn", "exec"),
        ("yarn", "dlx"),
        ("bun", "x"),
        ("pipx", "run"),
    }
)
RUNNERS = frozenset({"npx", "uvx", "bunx"})
TASK_RUNNERS = frozenset({"make", "just", "gradle", "gradlew"})
MANAGER_VALUES = frozenset({"--prefix", "--cwd", "-C", "--directory", "--project"})
RUN_VALUES = words(
    "--with -w --python -p --extra --group --package --directory --project --env-file --index"
    " --index-url --extra-index-url --default-index --from -n --name --prefix --cwd -C"
    " --workspace --filter -F --spec"
)
GIT_GLOBAL_VALUES = words(
    "-C -c --git-dir --work-tree --namespace --super-prefix --list-cmds --attr-source"
)
GIT_SAFE_KEYS = words(
    "user.name user.email commit.gpgsign tag.gpgsign init.defaultbranch core.autocrlf"
    " core.safecrlf core.eol core.quotepath core.filemode core.ignorecase pull.rebase pull.ff"
    " merge.conflictstyle rebase.autosquash rebase.autostash diff.renames"
    " status.showuntrackedfiles gc.auto maintenance.auto safe.directory"
)
GIT_SENSITIVE = re.compile(r"^(?:remote|url|credential|http|https)\b|extraheader|token|password")
GIT_REMOTE_COMMANDS = words(
    "push remote send-email request-pull daemon instaweb http-push http-fetch imap-send svn p4"
    " send-pack fetch-pack upload-pack receive-pack upload-archive http-backend shell"
    " remote-http remote-https remote-ftp remote-ftps remote-ext remote-fd cvsimport"
    " cvsexportcommit cvsserver"
)
# Subcommands that write the files they are given (the others read them or the index).
GIT_WRITES = words(
    "checkout restore rm mv apply am clean clone init worktree archive format-patch bundle"
    " reset stash switch merge rebase cherry-pick revert submodule sparse-checkout"
)
GIT_FETCH_VALUES = words(
    "-b --branch -o --origin --depth --deepen --shallow-since --shallow-exclude --reference"
    " --reference-if-able -j --jobs --filter --template --separate-git-dir --server-option"
    " --refmap --negotiation-tip -c --config --bundle-uri -X --strategy-option -s --strategy"
)
GIT_MESSAGE_OPTIONS = words(
    "-m --message --grep --author --committer -S -G --format --pretty --date --since --until"
)
NONE: frozenset[str] = frozenset()
PATTERN_TOOLS: dict[str, tuple[frozenset[str], frozenset[str], frozenset[str], frozenset[str]]] = {
    # name: (options whose value replaces the positional pattern or program,
    #        options whose value is a file that replaces it,
    #        options whose value is data, other options that take a value)
    "grep": (
        frozenset({"-e", "--regexp"}),
        frozenset({"-f", "--file"}),
        NONE,
        frozenset({"-A", "-B", "-C", "-m", "-d", "-D", "--context", "--max-count"}),
    ),
    "rg": (
        frozenset({"-e", "--regexp"}),
        frozenset({"-f", "--file"}),
        frozenset({"-r", "--replace"}),
        frozenset({"-A", "-B", "-C", "-m", "-g", "--glob", "-t", "-T", "--type", "-j", "-M"})
        | frozenset({"-E", "--encoding", "--max-count", "--iglob", "--type-not"}),
    ),
    "sed": (
        frozenset({"-e", "--expression"}),
        frozenset({"-f", "--file"}),
        NONE,
        frozenset({"-l", "--line-length"}),
    ),
    "awk": (
        frozenset({"-e", "--source"}),
        frozenset({"-f", "--file"}),
        frozenset({"-v", "-F", "--assign", "--field-separator"}),
        frozenset({"-W"}),
    ),
    "jq": (NONE, frozenset({"-f", "--from-file"}), frozenset({"--indent"}), NONE),
}
PATTERN_ALIASES = {
    "egrep": "grep",
    "fgrep": "grep",
    "zgrep": "grep",
    "ag": "rg",
    "ack": "rg",
    "gsed": "sed",
    "gawk": "awk",
    "mawk": "awk",
    "nawk": "awk",
    "yq": "jq",
    "gojq": "jq",
}
DATA_COMMANDS = words(
    "echo printf true false : tr basename dirname expr seq yes sleep type which"
    " shift exit return wait set shopt ulimit umask jobs"
)
DELIMITER_OPTIONS = {
    "cut": words("-d --delimiter"),
    "paste": words("-d --delimiters"),
    "sort": words("-t --field-separator"),
    "join": words("-t"),
    "column": words("-s --separator"),
}
ARITHMETIC_TESTS = words("-eq -ne -lt -le -gt -ge")
FILE_TESTS = words("-e -f -d -r -w -x -s -L -h -p -S -b -c -g -u -k -O -G -N")
FIND_PATTERNS = words(
    "-name -iname -path -ipath -wholename -iwholename -regex -iregex -lname -ilname -type"
    " -xtype -size -perm -user -group -uid -gid -mtime -mmin -atime -amin -ctime -cmin"
    " -maxdepth -mindepth -printf -fstype -links -inum -regextype -used -context"
)
FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
SIMPLE_WRAPPERS: dict[str, frozenset[str]] = {
    # name: its options that take a value
    "command": frozenset(),
    "builtin": frozenset(),
    "nohup": frozenset(),
    "setsid": frozenset(),
    "unbuffer": frozenset(),
    "caffeinate": frozenset({"-t", "-w"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "--class", "--classdata"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "exec": frozenset({"-a"}),
    "chronic": frozenset(),
}
TIMEOUT_VALUES = frozenset({"-s", "--signal", "-k", "--kill-after"})
ENV_VALUES = frozenset({"-u", "--unset"})
WATCH_VALUES = frozenset({"-n", "--interval", "-d", "--differences", "-q", "--equexit"})
# Every name the policy judges by: a function or alias may not take one.
NAMED = (
    KNOWN_COMMANDS
    | UNANALYSED_WRAPPERS
    | PROCESS_CONTROL_TOOLS
    | frozenset(SIMPLE_WRAPPERS)
    | PRIVILEGE
    | frozenset(UNRESTRICTED)
    | CREDENTIAL_TOOLS
    | ALWAYS_NETWORK
    | DEPLOY_TOOLS
    | KEYWORDS
    | words("timeout env busybox command_not_found_handle")
)
