#!/usr/bin/env python3
"""Symbol files for dnnmem's MXNet checks (tools/oracle/mxnet_measure.py measures
them; tools/oracle/mxnet_compare.py estimates them from tests/models/mxnet/).

  mxnet_gen.py zoo NAME OUT.json     a Gluon model-zoo network, hybridized, run once
                                     and exported (HybridBlock.export), with a
                                     SoftmaxOutput head named 'softmax' so that
                                     Module.fit's backward has a loss
  mxnet_gen.py rand SEED OUT.json    a seeded random architecture: conv / BatchNorm /
                                     activation / pooling / residual / concat blocks and
                                     FullyConnected layers, then the same head

No weights are written: Module.init_params initialises them.
"""
import random
import sys


def zoo(name, out):
    import mxnet as mx
    from mxnet.gluon.model_zoo import vision
    net = vision.get_model(name, classes=1000)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    shape = (1, 3, 299, 299) if name.startswith('inception') else (1, 3, 224, 224)
    net(mx.nd.zeros(shape)).wait_to_read()
    sym = net(mx.sym.var('data'))
    sym = mx.sym.SoftmaxOutput(sym, name='softmax')
    sym.save(out)


def rand(seed, out):
    import mxnet as mx
    r = random.Random(seed)
    x = mx.sym.var('data')
    ch = 3
    n = [0]

    def nm(p):
        n[0] += 1
        return '%s%d' % (p, n[0])

    def cba(x, cout, k, stride):
        x = mx.sym.Convolution(x, num_filter=cout, kernel=(k, k), stride=(stride, stride),
                               pad=(k // 2, k // 2), no_bias=r.random() < 0.5, name=nm('conv'))
        if r.random() < 0.7:
            x = mx.sym.BatchNorm(x, name=nm('bn'))
        act = r.choice(['relu', 'relu', 'sigmoid', 'tanh', 'softrelu'])
        return mx.sym.Activation(x, act_type=act, name=nm('act'))

    x = cba(x, r.choice([8, 16, 24]), 3, r.choice([1, 2]))
    ch = None
    width = r.choice([8, 16, 24])
    for _ in range(r.randint(3, 6)):
        kind = r.choice(['plain', 'res', 'concat', 'pool'])
        if kind == 'plain':
            width = r.choice([8, 16, 32, 48])
            x = cba(x, width, r.choice([1, 3, 5]), 1)
        elif kind == 'res':
            y = cba(x, width, 3, 1)
            y = mx.sym.Convolution(y, num_filter=width, kernel=(3, 3), pad=(1, 1), name=nm('conv'))
            s = mx.sym.Convolution(x, num_filter=width, kernel=(1, 1), name=nm('proj'))
            x = mx.sym.Activation(y + s, act_type='relu', name=nm('act'))
        elif kind == 'concat':
            a = cba(x, r.choice([8, 16]), 1, 1)
            b = cba(x, r.choice([8, 16]), 3, 1)
            x = mx.sym.Concat(a, b, dim=1, name=nm('concat'))
        else:
            x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type=r.choice(['max', 'avg']),
                               name=nm('pool'))
    x = mx.sym.Pooling(x, global_pool=True, kernel=(1, 1), pool_type='avg', name=nm('gpool'))
    x = mx.sym.Flatten(x, name=nm('flat'))
    for _ in range(r.randint(0, 2)):
        x = mx.sym.FullyConnected(x, num_hidden=r.choice([32, 64, 128]), name=nm('fc'))
        x = mx.sym.Activation(x, act_type='relu', name=nm('act'))
        if r.random() < 0.3:
            x = mx.sym.Dropout(x, p=0.3, name=nm('drop'))
    x = mx.sym.FullyConnected(x, num_hidden=10, name=nm('fc'))
    mx.sym.SoftmaxOutput(x, name='softmax').save(out)


if __name__ == '__main__':
    if sys.argv[1] == 'zoo':
        zoo(sys.argv[2], sys.argv[3])
    else:
        rand(int(sys.argv[2]), sys.argv[3])
